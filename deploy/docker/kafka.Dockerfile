# Apache Kafka 4.1.1 (KRaft, one node) on Debian's OpenJDK 17. Build context:
# the repository root.
#   docker build -f deploy/docker/kafka.Dockerfile -t usagebilling/kafka:4.1.1 .
#
# BASE is the one base image: debian:12.12-slim from a registry, or the
# local Debian base from debootstrap (usagebilling/debian:bookworm).
# BUILD_FROM says where the broker's jars and kafkatool (the Go health check
# and topic job, deploy/cmd/kafkatool) come from:
#   source (default): fetched and built here, with Maven (kafka/pom.xml) and
#                     the Go image GO_IMAGE, both from registries;
#   host:             made on the host by deploy/offline/images.sh into
#                     deploy/.build/ (the jars of `make kafka-jars`, kafkatool
#                     built with the workspace's Go toolchain): no registry.
# Base images pinned by version tag (a digest needs a registry to resolve):
# GO_IMAGE is the Go toolchain go.work pins (deploy/dockerfile_test.go checks);
# Debian by point release; distroless publishes no version tags beyond its
# Debian release (static-debian12).
ARG BASE=debian:12.12-slim
ARG GO_IMAGE=golang:1.27.3-trixie
ARG BUILD_FROM=source

FROM ${BASE} AS jars
RUN apt-get update -qq && \
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends maven openjdk-17-jdk-headless >/dev/null
COPY deploy/docker/kafka/pom.xml /build/pom.xml
RUN mvn -q -B -f /build/pom.xml dependency:copy-dependencies -DincludeScope=runtime -DoutputDirectory=/out/lib

FROM ${GO_IMAGE} AS tool
WORKDIR /src
COPY deploy/cmd/kafkatool/main.go ./
# sarama at the version deploy/go.mod requires (deploy/offline_test.go checks it).
RUN go mod init kafkatool >/dev/null 2>&1 && go get github.com/IBM/sarama@v1.61.1 && \
    CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/kafkatool .

FROM scratch AS from-source
COPY --from=jars /out/lib /lib
COPY --from=tool /out/kafkatool /kafkatool

FROM scratch AS from-host
COPY deploy/.build/kafka/lib /lib
COPY deploy/.build/bin/kafkatool /kafkatool

FROM from-${BUILD_FROM} AS inputs

FROM ${BASE}
RUN apt-get update -qq && \
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends openjdk-17-jre-headless >/dev/null && \
    apt-get clean && rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin /usr/share/doc /usr/share/man && \
    useradd --system --uid 1000 --home-dir /var/lib/kafka --create-home kafka && \
    mkdir -p /var/lib/kafka/data /opt/kafka/config && chown -R kafka:kafka /var/lib/kafka /opt/kafka/config
COPY --from=inputs /lib /opt/kafka/lib
COPY --from=inputs /kafkatool /usr/local/bin/kafkatool
COPY deploy/docker/kafka/entrypoint.sh /usr/local/bin/kafka-entrypoint.sh
USER kafka
# C1 only: the broker starts in about half the CPU time, which matters on a
# small machine running the whole system; set KAFKA_JVM_OPTS= for peak throughput.
ENV KAFKA_JVM_OPTS=-XX:TieredStopAtLevel=1
EXPOSE 9092 9093
HEALTHCHECK --interval=10s --timeout=10s --start-period=20s --retries=12 \
    CMD ["/usr/local/bin/kafkatool", "ready", "127.0.0.1:19092"]
ENTRYPOINT ["/usr/local/bin/kafka-entrypoint.sh"]
