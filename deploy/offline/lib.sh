# Sourced by the scripts beside it: the Docker CLI they use, and helpers.
#
# The Debian docker.io package's CLI (/usr/bin/docker, 20.10) builds with
# BuildKit by itself; a newer CLI without the buildx plugin refuses to (and
# may come first on PATH), so the scripts use the package's CLI unless
# DOCKER names another.
DOCKER=${DOCKER:-$( [ -x /usr/bin/docker ] && echo /usr/bin/docker || command -v docker || echo docker )}
export DOCKER_BUILDKIT=1
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
CACHE=${USAGEBILLING_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/usagebilling}
COMPOSE_VERSION=v2.40.3

say() { printf '%s %s\n' "==> [$(date -u +%H:%M:%S)]" "$*"; }
die() { printf 'error: %s\n' "$*" >&2; exit 1; }
