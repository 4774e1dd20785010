# syntax=docker/dockerfile:1
#
# The invoice service. Build context: the repository root.
#   docker build -f deploy/docker/invoice.Dockerfile -t usagebilling/invoice .
#
# The binary is built from the service's own go.mod (GOWORK=off), the way a
# release is built: the workspace is for development, and pkg comes in through
# the module's replace directive. deploy/compose_test.go checks this file
# against the service (cmd path, port).

FROM golang:1.26 AS build
WORKDIR /src
ENV CGO_ENABLED=0 GOWORK=off GOFLAGS=-mod=readonly
# Module files first, so the download layer is reused until they change.
COPY pkg/go.mod pkg/go.sum pkg/
COPY services/invoice/go.mod services/invoice/go.sum services/invoice/
RUN --mount=type=cache,target=/go/pkg/mod \
    cd services/invoice && go mod download
COPY pkg/ pkg/
COPY services/invoice/ services/invoice/
COPY deploy/cmd/probe/main.go probe/main.go
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    cd /src/services/invoice && go build -trimpath -ldflags="-s -w" -o /out/invoice ./cmd/invoice && \
    cd /src/probe && go build -trimpath -ldflags="-s -w" -o /out/probe main.go

# Static binaries only: no shell, no libc; uid 65532 (nonroot).
FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/invoice /usr/local/bin/invoice
COPY --from=build /out/probe /usr/local/bin/probe
USER 65532:65532
ENV HTTP_ADDR=:8084
EXPOSE 8084
HEALTHCHECK --interval=10s --timeout=5s --start-period=30s --retries=3 \
    CMD ["/usr/local/bin/probe", "http://127.0.0.1:8084/readyz"]
# "serve" (the default) applies the migrations and runs; "migrate" only migrates.
ENTRYPOINT ["/usr/local/bin/invoice"]
CMD ["serve"]
