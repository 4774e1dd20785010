#!/usr/bin/env bash
# CI's container steps (issue 11), run by .ci/run: a Docker engine from
# Debian's docker.io (installed and started if none answers; stopped at the
# end, also on failure), the compose plugin, the images built once
# (deploy/offline/images.sh; BuildKit's cache and the cached debootstrap
# tarball make later runs quick), then the compose demo, the testcontainers
# flow test (E2E_TARGET=containers) and the container chaos scenario, each
# timed.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
cd "$ROOT"
times=()
step() { # step <name> <command>...
  local name=$1 t0; shift; t0=$(date +%s)
  say "ci containers: $name"
  "$@"
  times+=("$(printf '%-34s %4ds' "$name" $(( $(date +%s) - t0 )))")
}
engine_was_running=0
"$DOCKER" info >/dev/null 2>&1 && engine_was_running=1
finish() {
  local code=$?
  if [ "$engine_was_running" = 0 ]; then
    deploy/offline/engine.sh stop || true
  else
    say "ci containers: the Docker engine was running before this run: left running"
  fi
  say "ci containers: step times"; for l in "${times[@]}"; do echo "    $l"; done
  exit "$code"
}
trap finish EXIT
began=$(date +%s)
step "engine (docker.io, dockerd)" deploy/offline/engine.sh start
step "compose plugin" deploy/offline/engine.sh compose
step "images" deploy/offline/images.sh
step "compose demo" deploy/offline/compose-demo.sh
step "testcontainers flow test" env E2E_TARGET=containers TESTCONTAINERS_RYUK_DISABLED=true \
  go test -count=1 -timeout 20m -run '^TestBillingFlow$' -v ./e2e/
step "container chaos" deploy/offline/compose-chaos.sh
times+=("$(printf '%-34s %4ds' "total" $(( $(date +%s) - began )))")
