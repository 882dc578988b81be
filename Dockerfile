# syntax=docker/dockerfile:1
#
# aggregator container image.
#   docker build --build-arg VERSION=$(git describe --tags --always) -t aggregator .
# Multi-arch: docker buildx build --platform linux/amd64,linux/arm64 ...
#
# The runtime stage is FROM scratch: a static binary, the CA bundle (TLS to
# the brokers) and nothing else, no shell, no package manager. It runs as a
# numeric non-root user and writes nothing to its root filesystem, so it
# works with readOnlyRootFilesystem (the Helm chart mounts an emptyDir at /tmp
# anyway). The IANA time zone database is compiled into the binary
# (scripts/build-static uses -tags timetzdata).

ARG GO_VERSION=1.26.8

FROM --platform=$BUILDPLATFORM golang:${GO_VERSION}-bookworm AS build
WORKDIR /src
# Modules first, so a source change does not download them again.
COPY go.mod go.sum ./
# The patched kfake go.mod replaces (third_party/kfake/PATCHES.md).
COPY third_party/kfake/go.mod third_party/kfake/go.mod
RUN --mount=type=cache,target=/go/pkg/mod \
    go mod download
COPY . .
ARG VERSION=dev
ARG TARGETOS
ARG TARGETARCH
RUN --mount=type=cache,target=/go/pkg/mod \
    --mount=type=cache,target=/root/.cache/go-build \
    GOOS=${TARGETOS:-linux} GOARCH=${TARGETARCH:-amd64} \
    scripts/build-static /out/aggregator "${VERSION}"

FROM scratch AS runtime
ARG VERSION=dev
LABEL org.opencontainers.image.title="aggregator" \
      org.opencontainers.image.description="Flink-exact event-time windows over Kafka, as one small binary" \
      org.opencontainers.image.version="${VERSION}"
COPY --from=build /etc/ssl/certs/ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
COPY --from=build /out/aggregator /aggregator
# 65532 is the "nonroot" user of distroless images; numeric, so Kubernetes
# can verify runAsNonRoot without an /etc/passwd in the image.
USER 65532:65532
EXPOSE 9090
ENTRYPOINT ["/aggregator"]
CMD ["run", "--config", "/etc/aggregator/config.yaml"]
