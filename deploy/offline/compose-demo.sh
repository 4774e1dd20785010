#!/usr/bin/env bash
# `make compose-demo`: deploy/compose.yaml run for real on the local images
# (deploy/offline/images.sh), the client flow of `make demo` driven against
# it with every figure checked, and everything torn down (containers,
# network, volumes) at the end, also on failure and on Ctrl-C.
#
# Offline it starts the core of the file: postgres, kafka, topic-init,
# toxiproxy, the five services and Prometheus; the client then runs the
# Grafana dashboard's queries against Prometheus. kafka-exporter and Grafana
# are left out: Debian packages neither (see deploy/README.md).
set -euo pipefail
. "$(dirname "$0")/lib.sh"
cd "$ROOT"

PROJECT=${COMPOSE_PROJECT:-usagebilling-demo}
CORE=(postgres kafka topic-init toxiproxy meter usage billing invoice query prometheus)
compose() { "$DOCKER" compose -f deploy/compose.yaml -p "$PROJECT" "$@"; }

torn=0
teardown() {
  [ "$torn" = 1 ] && return; torn=1
  say "tearing down: containers, network and volumes of project $PROJECT"
  compose down --volumes --remove-orphans --timeout 10 >/dev/null 2>&1 || true
  left=$("$DOCKER" ps -aq --filter "label=com.docker.compose.project=$PROJECT"; \
         "$DOCKER" volume ls -q --filter "label=com.docker.compose.project=$PROJECT"; \
         "$DOCKER" network ls -q --filter "label=com.docker.compose.project=$PROJECT")
  [ -z "$left" ] && say "nothing of $PROJECT is left" || say "WARNING: left behind: $left"
}
trap teardown EXIT
trap 'say "interrupted"; teardown; exit 130' INT TERM

began=$(date +%s)
for port in 8081 8082 8083 8084 8085 8474 9090 29092; do
  if (exec 3<>/dev/tcp/127.0.0.1/$port) 2>/dev/null; then
    die "port $port on 127.0.0.1 is taken (a \`make up\` or another compose project?): compose.yaml publishes it"
  fi
done
compose down --volumes --remove-orphans --timeout 5 >/dev/null 2>&1 || true

say "docker compose up: ${CORE[*]} (local images, no build, no pull)"
compose up --detach --no-build --pull never --wait --wait-timeout 300 "${CORE[@]}" || {
  compose ps -a; for s in "${CORE[@]}"; do echo "--- $s"; compose logs --tail 30 "$s"; done; die "compose up failed"; }
up=$(( $(date +%s) - began ))
say "every container is up and healthy after ${up}s:"
compose ps --format 'table {{.Service}}\t{{.Image}}\t{{.Status}}'
unhealthy=$(compose ps --format '{{.Service}} {{.Health}}' | awk '$2 != "healthy" && $1 != "topic-init" && $1 !~ /-migrate$/' || true)
[ -z "$unhealthy" ] || die "not healthy: $unhealthy"
say "topic-init:"; compose logs --no-log-prefix topic-init | sed 's/^/    /'

go build -o bin/ ./e2e/containers/cmd/compose-demo
flow=0
./bin/compose-demo || flow=$?
if [ "$flow" != 0 ]; then
  for s in meter usage billing invoice query; do echo "--- last lines of $s"; compose logs --no-log-prefix --tail 20 "$s"; done
fi
teardown
say "compose demo took $(( $(date +%s) - began ))s (up ${up}s)"
exit "$flow"
