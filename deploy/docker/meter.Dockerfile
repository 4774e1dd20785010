# The meter service. Build context: the repository root.
#   docker build -f deploy/docker/meter.Dockerfile -t usagebilling/meter:dev .
#
# BASE is the one base image of the final stage: distroless static from a
# registry (the default), or scratch where no registry is reachable (the
# binaries are static and run as uid 65532; nothing else is needed).
# BUILD_FROM says where the binaries come from:
#   source (default): built here in GO_IMAGE from the service's own go.mod
#                     (GOWORK=off), the way a release is built: the workspace
#                     is for development, pkg comes in through the module's
#                     replace directive;
#   host:             built on the host by deploy/offline/images.sh with the
#                     same flags and the workspace's pinned Go toolchain, into
#                     deploy/.build/bin (no registry).
# deploy/dockerfile_test.go checks this file against the service (cmd path,
# port) and deploy/offline/images.sh's host build against the source stage.
# Base images pinned by version tag (a digest needs a registry to resolve):
# GO_IMAGE is the Go toolchain go.work pins (deploy/dockerfile_test.go checks);
# Debian by point release; distroless publishes no version tags beyond its
# Debian release (static-debian12).
ARG BASE=gcr.io/distroless/static-debian12:nonroot
ARG GO_IMAGE=golang:1.27.3-trixie
ARG BUILD_FROM=source

FROM ${GO_IMAGE} AS from-source
WORKDIR /src
ENV CGO_ENABLED=0 GOWORK=off GOFLAGS=-mod=readonly
# Module files first, so the download layer is reused until they change.
COPY pkg/go.mod pkg/go.sum pkg/
# testkit (test tooling) is in the module graph through pkg's tests; its
# module files are enough for go mod download, no package of it is built.
COPY testkit/go.mod testkit/go.sum testkit/
COPY services/meter/go.mod services/meter/go.sum services/meter/
RUN --mount=type=cache,target=/go/pkg/mod \
    cd services/meter && go mod download
COPY pkg/ pkg/
COPY services/meter/ services/meter/
COPY deploy/cmd/probe/main.go probe/main.go
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    cd /src/services/meter && go build -trimpath -ldflags="-s -w" -o /out/meter ./cmd/meter && \
    cd /src/probe && go build -trimpath -ldflags="-s -w" -o /out/probe main.go

FROM scratch AS from-host
COPY deploy/.build/bin/meter deploy/.build/bin/probe /out/

FROM from-${BUILD_FROM} AS binaries

# Static binaries only: no shell, no libc; uid 65532 (nonroot).
FROM ${BASE}
COPY --from=binaries /out/meter /usr/local/bin/meter
COPY --from=binaries /out/probe /usr/local/bin/probe
USER 65532:65532
ENV HTTP_ADDR=:8081
EXPOSE 8081
HEALTHCHECK --interval=10s --timeout=5s --start-period=30s --retries=3 \
    CMD ["/usr/local/bin/probe", "http://127.0.0.1:8081/readyz"]
# "serve" (the default) applies the migrations and runs; "migrate" only migrates.
ENTRYPOINT ["/usr/local/bin/meter"]
CMD ["serve"]
