#!/usr/bin/env bash
# The Docker engine and the compose v2 plugin, on a machine with neither.
#
#   deploy/offline/engine.sh start   # find an engine that answers, or install docker.io and start dockerd
#   deploy/offline/engine.sh stop    # stop the dockerd that `start` started (and only that one)
#   deploy/offline/engine.sh compose # find `docker compose`, or build it from the Go module proxy
#
# dockerd runs in the background with overlay2 and the cgroupfs driver, its
# log in $STATE/dockerd.log and its pid in $STATE/dockerd.pid; `stop` ends
# that pid only, so an engine that was already running is left alone. The
# compose plugin is built once (github.com/docker/compose/v2 at
# COMPOSE_VERSION, ~5 minutes on two cores) and cached in
# ~/.cache/usagebilling/docker-compose-<version>.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
STATE=${DOCKERD_STATE:-/run/usagebilling-dockerd}

start() {
  if "$DOCKER" info >/dev/null 2>&1; then
    say "engine: a Docker engine already answers ($("$DOCKER" version -f '{{.Server.Version}}'))"
    return
  fi
  if ! command -v dockerd >/dev/null; then
    say "engine: installing docker.io with apt-get"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq -o DPkg::Lock::Timeout=600 docker.io >/dev/null
    DOCKER=/usr/bin/docker
  fi
  mkdir -p "$STATE"
  say "engine: starting dockerd (log: $STATE/dockerd.log)"
  # setsid: its own session, so a Ctrl-C in the caller's terminal does not reach it.
  setsid dockerd --storage-driver=overlay2 --exec-opt native.cgroupdriver=cgroupfs \
    --pidfile "$STATE/dockerd.pid" >"$STATE/dockerd.log" 2>&1 < /dev/null &
  echo $! > "$STATE/started.pid"
  for i in $(seq 1 60); do
    if "$DOCKER" info >/dev/null 2>&1; then
      say "engine: dockerd $("$DOCKER" version -f '{{.Server.Version}}') answers after ${i}s"
      return
    fi
    kill -0 "$(cat "$STATE/started.pid")" 2>/dev/null || { tail -20 "$STATE/dockerd.log" >&2; die "dockerd exited"; }
    sleep 1
  done
  tail -20 "$STATE/dockerd.log" >&2
  die "dockerd does not answer after 60s"
}

stop() {
  [ -f "$STATE/started.pid" ] || { say "engine: no dockerd started by engine.sh: nothing to stop"; return; }
  pid=$(cat "$STATE/started.pid")
  if [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = dockerd ]; then
    say "engine: stopping dockerd (pid $pid)"
    kill -TERM "$pid"
    for _ in $(seq 1 30); do kill -0 "$pid" 2>/dev/null || break; sleep 1; done
    kill -0 "$pid" 2>/dev/null && { say "engine: dockerd still running after 30s: SIGKILL"; kill -KILL "$pid"; }
  fi
  rm -f "$STATE/started.pid"
}

compose() {
  if "$DOCKER" compose version >/dev/null 2>&1; then
    say "compose: $("$DOCKER" compose version --short 2>/dev/null || "$DOCKER" compose version)"
    return
  fi
  bin=$CACHE/docker-compose-$COMPOSE_VERSION
  if [ ! -x "$bin" ]; then
    say "compose: building github.com/docker/compose/v2 $COMPOSE_VERSION from the Go module proxy (once; cached in $bin)"
    # Its go.mod has exclude directives, so it builds as the main module from
    # its own source, not with `go install pkg@version`.
    dir=$(GOFLAGS=-mod=mod GOWORK=off go mod download -json "github.com/docker/compose/v2@$COMPOSE_VERSION" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
    [ -n "$dir" ] || die "go mod download github.com/docker/compose/v2@$COMPOSE_VERSION failed"
    work=$(mktemp -d); trap 'rm -rf "$work"' RETURN
    cp -r "$dir/." "$work"; chmod -R u+w "$work"
    mkdir -p "$CACHE"
    (cd "$work" && CGO_ENABLED=0 GOWORK=off go build -trimpath -ldflags "-s -w -X github.com/docker/compose/v2/internal.Version=$COMPOSE_VERSION" -o "$bin.tmp" ./cmd)
    mv "$bin.tmp" "$bin"
  fi
  mkdir -p "$HOME/.docker/cli-plugins"
  ln -sf "$bin" "$HOME/.docker/cli-plugins/docker-compose"
  say "compose: $("$DOCKER" compose version)"
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  compose) compose ;;
  *) echo "usage: $0 start|stop|compose" >&2; exit 2 ;;
esac
