# Prometheus from Debian's packages (bookworm: 2.42). Build context: the
# repository root.
#   docker build -f deploy/docker/prometheus.Dockerfile -t usagebilling/prometheus:2.42 .
#
# BASE is the one base image: debian:12.12-slim from a registry, or the
# local Debian base that deploy/offline/images.sh makes with debootstrap
# (--build-arg BASE=usagebilling/debian:bookworm) where no registry is
# reachable. apt-get reaches Debian's mirror either way, so the same
# Prometheus runs with a registry and without one. The configuration is
# mounted by compose (deploy/prometheus/prometheus.yml).
ARG BASE=debian:12.12-slim
FROM ${BASE}
# libjs-moment-timezone, a dependency of the web UI, ships every release of
# the time zone database since 2014 (about 210 MB under data/); the UI loads
# only moment-timezone-with-data.min.js, so dpkg leaves data/ unpacked.
RUN echo 'path-exclude=/usr/share/javascript/moment-timezone/data/*' > /etc/dpkg/dpkg.cfg.d/no-moment-timezone-data && \
    apt-get update -qq && \
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus >/dev/null && \
    apt-get clean && rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin /usr/share/doc /usr/share/man && \
    mkdir -p /prometheus && chown prometheus:prometheus /prometheus
USER prometheus
WORKDIR /prometheus
EXPOSE 9090
# Debian's promtool 2.42 has no `check healthy`: an instant query answers
# once the server serves its API.
HEALTHCHECK --interval=5s --timeout=5s --start-period=10s --retries=12 \
    CMD ["promtool", "query", "instant", "http://127.0.0.1:9090", "vector(1)"]
ENTRYPOINT ["/usr/bin/prometheus"]
CMD ["--config.file=/etc/prometheus/prometheus.yml", "--storage.tsdb.path=/prometheus"]
