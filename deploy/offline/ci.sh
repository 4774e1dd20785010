#!/usr/bin/env bash
# CI's container steps: a Docker engine from Debian's docker.io,
# the compose plugin and the images built locally, then `make compose-demo`,
# `make e2e-containers` and `make compose-chaos`, each timed.
#
#   deploy/offline/ci.sh           # all of it, in the foreground
#   deploy/offline/ci.sh begin     # start `prepare` in the background, at the lowest CPU priority (`background`)
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
  setsid nice -n 19 "$0" background >"$RUN/prepare.log" 2>&1 < /dev/null &
  echo $! > "$RUN/prepare.pid"
}

# background is `prepare` at the lowest priority. nice alone is not enough:
# with the kernel's autogroup scheduling (/proc/sys/kernel/sched_autogroup_enabled,
# on by default) every session is a group of its own with an equal share of
# the CPU whatever its processes' nice, and the preparation, dockerd,
# containerd and the containers of a build each run in sessions of their
# own. So while it prepares, every process at nice 19 (what the
# preparation starts inherits it) has its session's share lowered too
# (/proc/<pid>/autogroup), and at ionice's idle class where the disk's
# scheduler honours it. Measured in CI before this: the compose plugin's
# build at nice 19 took half the CPU from the Go tests beside it.
background() {
  lower_sessions 19
  ionice -c 3 -p $$ 2>/dev/null || true
  ( while sleep 2; do lower_sessions 19; done ) &
  local watcher=$! code=0
  prepare || code=$?
  kill "$watcher" 2>/dev/null || true
  return "$code"
}

# lower_sessions <nice>: every process at nice 19 (not kernel threads) has
# its session's (autogroup's) nice set to <nice>; with 0 the processes
# themselves are brought back to nice 0 too (finish does this for the
# engine, whose containers run the steps). Shell builtins only: it runs
# every 2 s.
lower_sessions() {
  local want=$1 stat p
  [ -w /proc/self/autogroup ] || return 0
  for p in /proc/[0-9]*; do
    read -r stat 2>/dev/null < "$p/stat" || continue
    set -- ${stat##*) }                    # the fields after the command name
    [ "${17:-}" = 19 ] && [ -e "$p/exe" ] || continue   # field 19: nice; a kernel thread has no exe
    if [ "$want" = 0 ]; then renice -n 0 -p "${p#/proc/}" >/dev/null 2>&1 || true; fi
    { echo "$want" > "$p/autogroup"; } 2>/dev/null || true
  done
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
  lower_sessions 0   # the engine and its containers run the steps at the normal priority
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
  background) background ;;
  finish) finish ;;
  stop) stop ;;
  *) echo "usage: $0 [begin|finish|stop]" >&2; exit 2 ;;
esac
