#!/usr/bin/env bash
# Builds every image deploy/compose.yaml runs offline, with no image registry:
#
#   usagebilling/debian:bookworm   the base: debootstrap --variant=minbase from Debian's
#                                  mirror, `docker import`ed (the tarball is cached in
#                                  ~/.cache/usagebilling/, so later runs import it in seconds)
#   usagebilling/postgres:15       PostgreSQL 15 from Debian's packages, on that base
#   usagebilling/kafka:4.1.1       Debian's OpenJDK 17 and the broker jars of `make kafka-jars`
#   usagebilling/prometheus:2.42   Prometheus from Debian's packages, on that base
#   usagebilling/toxiproxy:2.12.0  toxiproxy built from the Go module proxy, FROM scratch
#   usagebilling/<service>:dev     the five services, FROM scratch
#
# The Go binaries are built here on the host with the workspace's Go toolchain
# (the flags of the Dockerfiles' source stage: CGO_ENABLED=0, -trimpath,
# GOWORK=off from each service's own go.mod) into deploy/.build/, and the
# Dockerfiles copy them (BUILD_FROM=host). BuildKit caches every layer, so a
# second run rebuilds only what changed. Prints each image's size at the end.
set -euo pipefail
. "$(dirname "$0")/lib.sh"
cd "$ROOT"

BASE_IMAGE=usagebilling/debian:bookworm
BUILD=deploy/.build
SERVICES=(meter usage billing invoice query)
began=$(date +%s)

base() {
  if "$DOCKER" image inspect "$BASE_IMAGE" >/dev/null 2>&1; then
    say "base: $BASE_IMAGE is there"
    return
  fi
  tarball=$CACHE/debian-bookworm-minbase.tar
  if [ ! -s "$tarball" ]; then
    command -v debootstrap >/dev/null || {
      say "base: installing debootstrap with apt-get"
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq -o DPkg::Lock::Timeout=600 debootstrap >/dev/null; }
    mirror=$(debian_mirror)
    dir=$(mktemp -d)
    say "base: debootstrap --variant=minbase bookworm from $mirror (about a minute; cached in $tarball)"
    debootstrap --variant=minbase bookworm "$dir" "$mirror" >"$dir.log" 2>&1 || { tail -20 "$dir.log" >&2; die "debootstrap failed"; }
    rm -rf "$dir"/var/cache/apt/archives/*.deb "$dir"/var/lib/apt/lists/*
    mkdir -p "$CACHE"
    tar -C "$dir" -c . > "$tarball.tmp" && mv "$tarball.tmp" "$tarball"
    rm -rf "$dir" "$dir.log"
  fi
  say "base: docker import $tarball as $BASE_IMAGE"
  "$DOCKER" import -c 'CMD ["/bin/bash"]' "$tarball" "$BASE_IMAGE" >/dev/null
}

# debian_mirror is the Debian mirror this machine's apt uses.
debian_mirror() {
  local m
  m=$(grep -hs '^URIs:' /etc/apt/sources.list.d/*.sources | awk '{print $2}' | grep -v security | head -1)
  [ -n "$m" ] || m=$(grep -hs '^deb ' /etc/apt/sources.list /etc/apt/sources.list.d/*.list | awk '{print $2}' | grep -v security | head -1)
  echo "${m:-http://deb.debian.org/debian}"
}

binaries() {
  say "binaries: building the services, probe, kafkatool and toxiproxy on the host ($(go env GOVERSION)) into $BUILD/bin"
  mkdir -p "$BUILD/bin"
  local out; out=$(cd "$BUILD/bin" && pwd)
  export CGO_ENABLED=0
  for s in "${SERVICES[@]}"; do
    (cd "services/$s" && GOWORK=off GOFLAGS=-mod=readonly go build -trimpath -ldflags="-s -w" -o "$out/$s" "./cmd/$s")
  done
  (cd deploy/cmd/probe && GOWORK=off go build -trimpath -ldflags="-s -w" -o "$out/probe" main.go)
  (cd deploy && GOWORK=off GOFLAGS=-mod=readonly go build -trimpath -ldflags="-s -w" -o "$out/kafkatool" ./cmd/kafkatool)
  if [ ! -x "$out/toxiproxy-server" ] || [ ! -x "$out/toxiproxy-cli" ]; then
    local gobin; gobin=$(mktemp -d)
    GOBIN=$gobin GOWORK=off go install -trimpath -ldflags="-s -w" github.com/Shopify/toxiproxy/v2/cmd/server@v2.12.0 github.com/Shopify/toxiproxy/v2/cmd/cli@v2.12.0
    mv "$gobin/server" "$out/toxiproxy-server"; mv "$gobin/cli" "$out/toxiproxy-cli"; rm -rf "$gobin"
  fi
  say "kafka: the broker jars (make kafka-jars: Maven Central once, then the cache) into $BUILD/kafka/lib"
  local lib; lib=$(go run ./testkit/cmd/kafka-jars)
  rm -rf "$BUILD/kafka/lib"; mkdir -p "$BUILD/kafka"; cp -r "$lib" "$BUILD/kafka/lib"
}

build() { # build <image> <dockerfile> <build-arg>...
  local image=$1 file=$2; shift 2
  local args=()
  for a in "$@"; do args+=(--build-arg "$a"); done
  say "image: $image ($file)"
  local t0; t0=$(date +%s)
  "$DOCKER" build -q -f "$file" "${args[@]}" -t "$image" . >/dev/null
  say "image: $image built in $(( $(date +%s) - t0 ))s"
}

base
binaries
build usagebilling/postgres:15 deploy/docker/postgres.Dockerfile BASE=$BASE_IMAGE
build usagebilling/kafka:4.1.1 deploy/docker/kafka.Dockerfile BASE=$BASE_IMAGE BUILD_FROM=host
build usagebilling/prometheus:2.42 deploy/docker/prometheus.Dockerfile BASE=$BASE_IMAGE
build usagebilling/toxiproxy:2.12.0 deploy/docker/toxiproxy.Dockerfile BASE=scratch BUILD_FROM=host
for s in "${SERVICES[@]}"; do
  build "usagebilling/$s:dev" "deploy/docker/$s.Dockerfile" BASE=scratch BUILD_FROM=host
done
say "images built in $(( $(date +%s) - began ))s; sizes:"
"$DOCKER" image ls --format '{{.Repository}}:{{.Tag}}\t{{.Size}}' | grep '^usagebilling/' | sort | awk -F'\t' '{printf "  %-32s %s\n", $1, $2}'
