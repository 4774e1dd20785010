#!/usr/bin/env bash
# `make compose-chaos`: the container chaos scenario (e2e/containers,
# TestContainerChaos): deploy/compose.yaml's core on the local images, usage
# facts under load, `docker kill` of billing and then of Kafka, both started
# again; nothing lost, every period reconciled. The test tears the project
# down itself; the trap here does it too when the run is interrupted.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
cd "$ROOT"
export COMPOSE_PROJECT=${COMPOSE_PROJECT:-usagebilling-chaos}
teardown() {
  "$DOCKER" compose -f deploy/compose.yaml -p "$COMPOSE_PROJECT" down --volumes --remove-orphans --timeout 10 >/dev/null 2>&1 || true
}
trap 'say "interrupted: tearing down $COMPOSE_PROJECT"; teardown; exit 130' INT TERM
trap teardown EXIT
began=$(date +%s)
go test -tags containers -count=1 -timeout 20m -run '^TestContainerChaos$' -v ./e2e/containers/
say "container chaos took $(( $(date +%s) - began ))s"
