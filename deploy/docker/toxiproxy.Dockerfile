# toxiproxy 2.12.0 (server and CLI), static binaries on an empty image. Build
# context: the repository root.
#   docker build -f deploy/docker/toxiproxy.Dockerfile -t usagebilling/toxiproxy:2.12.0 .
#
# BASE is the one base image (the binaries are static: scratch will do).
# BUILD_FROM: source (default) builds both from the Go module proxy in
# GO_IMAGE; host copies what deploy/offline/images.sh built on the host into
# deploy/.build/bin (no registry).
# Base images pinned by version tag (a digest needs a registry to resolve):
# GO_IMAGE is the Go toolchain go.work pins (deploy/dockerfile_test.go checks);
# Debian by point release; distroless publishes no version tags beyond its
# Debian release (static-debian12).
ARG BASE=scratch
ARG GO_IMAGE=golang:1.27.3-trixie
ARG BUILD_FROM=source

FROM ${GO_IMAGE} AS from-source
ENV CGO_ENABLED=0 GOBIN=/out
RUN go install -trimpath -ldflags="-s -w" github.com/Shopify/toxiproxy/v2/cmd/server@v2.12.0 && \
    go install -trimpath -ldflags="-s -w" github.com/Shopify/toxiproxy/v2/cmd/cli@v2.12.0 && \
    mv /out/server /out/toxiproxy-server && mv /out/cli /out/toxiproxy-cli

FROM scratch AS from-host
COPY deploy/.build/bin/toxiproxy-server deploy/.build/bin/toxiproxy-cli /out/

FROM from-${BUILD_FROM} AS inputs

FROM ${BASE}
COPY --from=inputs /out/toxiproxy-server /toxiproxy
COPY --from=inputs /out/toxiproxy-cli /toxiproxy-cli
USER 65532:65532
EXPOSE 8474
ENTRYPOINT ["/toxiproxy"]
CMD ["-host=0.0.0.0"]
