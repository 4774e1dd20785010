#!/usr/bin/env bash
# CI's container steps (issue 11): a Docker engine from Debian's docker.io,
# the compose plugin and the images built locally, then `make compose-demo`,
# `make e2e-containers` and `make compose-chaos`, each timed.
#
#   deploy/offline/ci.sh           # all of it, in the foreground
#   deploy/offline/ci.sh begin     # start `prepare` in the background, at the lowest CPU priority
#   deploy/offline/ci.sh finish    # wait for it (printing its progress), run the three steps, stop
#   deploy/offline/ci.sh stop      # end a background `prepare` and stop the engine this run started
#
# .ci/run calls `begin` before the Go tests and `finish` after them: building
# the compose plugin (~4 minutes of compiling on two cores), debootstrap and
# the images then takes the CPU the tests leave idle instead of adding its
# own minutes to the run. `stop` runs on every exit (also on failure): it
# stops dockerd only if this run started it (an engine that answered before
# is left running).
set -euo pipefail
. "$(dirname "$0")/lib.sh"
cd "$ROOT"
RUN=${CI_CONTAINERS_STATE:-/run/usagebilling-ci-containers}
mkdir -p "$RUN"

timed() { # timed <name> <command>...: runs it and appends its time to $RUN/times
  local name=$1 t0 code=0; shift; t0=$(date +%s)
  say "ci containers: $name"
  "$@" || code=$?
  printf '    %-34s %4ds%s\n' "$name" $(( $(date +%s) - t0 )) "$([ "$code" = 0 ] || echo " (failed: exit $code)")" >> "$RUN/times"
  return "$code"
}

prepare() {
  if "$DOCKER" info >/dev/null 2>&1; then touch "$RUN/engine-theirs"; else touch "$RUN/engine-ours"; fi
  timed "engine (docker.io, dockerd)" deploy/offline/engine.sh start
  timed "compose plugin" deploy/offline/engine.sh compose
  timed "keys (make compose-keys)" make --no-print-directory compose-keys
  timed "images" deploy/offline/images.sh
}

steps() { # all three run even when one fails; fails if any did
  local failed=0
  timed "compose demo" make --no-print-directory compose-demo || failed=1
  timed "testcontainers flow test" make --no-print-directory e2e-containers || failed=1
  timed "container chaos" make --no-print-directory compose-chaos || failed=1
  return "$failed"
}

begin() {
  rm -f "$RUN"/*
  say "ci containers: preparing in the background (engine, compose plugin, images; log $RUN/prepare.log)"
  # setsid: its own process group, so `stop` can end all of it.
  setsid nice -n 19 "$0" prepare >"$RUN/prepare.log" 2>&1 < /dev/null &
  echo $! > "$RUN/prepare.pid"
}

finish() {
  local pid t0 code=0; pid=$(cat "$RUN/prepare.pid"); t0=$(date +%s)
  while kill -0 "$pid" 2>/dev/null; do
    say "ci containers: waiting for the background preparation ($(( $(date +%s) - t0 ))s): $(tail -n1 "$RUN/prepare.log")"
    sleep 30
  done
  say "ci containers: waited $(( $(date +%s) - t0 ))s for the background preparation; its log:"
  sed 's/^/    /' "$RUN/prepare.log"
  grep -q failed "$RUN/times" 2>/dev/null && die "the background preparation failed (above)"
  [ -s "$RUN/times" ] && grep -q '^    images ' "$RUN/times" || die "the background preparation did not finish (above)"
  steps || code=$?
  stop
  return "$code"
}

stop() {
  if [ -f "$RUN/prepare.pid" ]; then
    local pid; pid=$(cat "$RUN/prepare.pid")
    kill -0 "$pid" 2>/dev/null && { say "ci containers: ending the background preparation"; kill -- "-$pid" 2>/dev/null || true; }
    rm -f "$RUN/prepare.pid"
  fi
  if [ -f "$RUN/engine-ours" ]; then
    deploy/offline/engine.sh stop || true
    rm -f "$RUN/engine-ours"
  elif [ -f "$RUN/engine-theirs" ]; then
    say "ci containers: the Docker engine was running before this run: left running"
    rm -f "$RUN/engine-theirs"
  fi
  if [ -f "$RUN/times" ]; then
    say "ci containers: step times"; cat "$RUN/times"; rm -f "$RUN/times"
  fi
}

case "${1:-all}" in
  all) rm -f "$RUN"/*; trap stop EXIT; prepare; steps ;;
  begin) begin ;;
  prepare) prepare ;;
  finish) finish ;;
  stop) stop ;;
  *) echo "usage: $0 [begin|finish|stop]" >&2; exit 2 ;;
esac
