# PostgreSQL 15 from Debian's packages. Build context: the repository root.
#   docker build -f deploy/docker/postgres.Dockerfile -t usagebilling/postgres:15 .
#
# BASE is the one base image: debian:12.12-slim from a registry, or the
# local Debian base that deploy/offline/images.sh makes with debootstrap
# (--build-arg BASE=usagebilling/debian:bookworm) where no registry is
# reachable. apt-get reaches Debian's mirror either way.
# Base images pinned by version tag (a digest needs a registry to resolve):
# GO_IMAGE is the Go toolchain go.work pins (deploy/dockerfile_test.go checks);
# Debian by point release; distroless publishes no version tags beyond its
# Debian release (static-debian12).
ARG BASE=debian:12.12-slim
FROM ${BASE}
# No cluster at install time: the entrypoint makes one in PGDATA.
RUN mkdir -p /etc/postgresql-common/createcluster.d && \
    echo "create_main_cluster = false" > /etc/postgresql-common/createcluster.d/no-main.conf && \
    apt-get update -qq && \
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends postgresql-15 >/dev/null && \
    apt-get clean && rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin /usr/share/doc /usr/share/man && \
    mkdir -p /docker-entrypoint-initdb.d /var/lib/postgresql/data /var/run/postgresql && \
    chown -R postgres:postgres /var/lib/postgresql /var/run/postgresql && chmod 700 /var/lib/postgresql/data
ENV PATH=/usr/lib/postgresql/15/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    PGDATA=/var/lib/postgresql/data
COPY deploy/docker/postgres/entrypoint.sh /usr/local/bin/docker-entrypoint.sh
USER postgres
EXPOSE 5432
STOPSIGNAL SIGINT
HEALTHCHECK --interval=5s --timeout=5s --start-period=10s --retries=12 \
    CMD ["pg_isready", "-h", "127.0.0.1", "-U", "postgres", "-d", "postgres"]
ENTRYPOINT ["/usr/local/bin/docker-entrypoint.sh"]
