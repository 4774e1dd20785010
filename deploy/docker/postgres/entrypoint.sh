#!/bin/sh
# The PostgreSQL image's entrypoint, with the postgres image's conventions:
# on an empty PGDATA it runs initdb (superuser POSTGRES_USER, password
# POSTGRES_PASSWORD), then the *.sql and *.sh files of
# /docker-entrypoint-initdb.d on a temporary server that listens on the unix
# socket only (so a TCP answer means initialisation is done), then the server.
set -eu
: "${POSTGRES_PASSWORD:?set POSTGRES_PASSWORD}"
POSTGRES_USER=${POSTGRES_USER:-postgres}
if [ ! -s "$PGDATA/PG_VERSION" ]; then
  pw=$(mktemp)
  printf '%s\n' "$POSTGRES_PASSWORD" > "$pw"
  initdb -D "$PGDATA" -U "$POSTGRES_USER" --pwfile="$pw" -E UTF8 --locale=C \
    --auth-local=trust --auth-host=scram-sha-256 >/dev/null
  rm -f "$pw"
  echo "listen_addresses = '*'" >> "$PGDATA/postgresql.conf"
  echo "host all all all scram-sha-256" >> "$PGDATA/pg_hba.conf"
  pg_ctl -D "$PGDATA" -w -o "-c listen_addresses=''" start
  for f in /docker-entrypoint-initdb.d/*; do
    case "$f" in
      *.sql) echo "postgres: running $f"; psql -v ON_ERROR_STOP=1 -q -U "$POSTGRES_USER" -d postgres -f "$f" ;;
      *.sh) echo "postgres: running $f"; . "$f" ;;
    esac
  done
  pg_ctl -D "$PGDATA" -w -m fast stop
fi
exec postgres -D "$PGDATA" "$@"
