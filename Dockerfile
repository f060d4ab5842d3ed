# Multi-stage build of the leasehold node: a static binary (pure-Go SQLite,
# no cgo) in an image with nothing else, run as a non-root user.
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=docker
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X github.com/leasehold/leasehold.buildVersion=${VERSION}" -o /out/leasehold ./cmd/leasehold \
    && mkdir -p /out/data

FROM scratch
COPY --from=build /out/leasehold /leasehold
COPY --from=build --chown=65532:65532 /out/data /data
USER 65532:65532
VOLUME /data
EXPOSE 8080
# SQLite's rare temporary files go beside the catalog; scratch has no /tmp.
# The embedded NATS server stays inside the container: a node of a fleet
# sets LEASEHOLD_NATS_CLUSTER_LISTEN and LEASEHOLD_NATS_ROUTES with
# LEASEHOLD_NATS_SECRET_FILE (a mounted secret), and is refused without
# one. No secret is baked into the image.
ENV LEASEHOLD_DATA=/data LEASEHOLD_LISTEN=0.0.0.0:8080 TMPDIR=/data
# Ready means the catalog takes writes, the disk has room and the fleet is
# joined; healthcheck reads LEASEHOLD_LISTEN to find the node.
HEALTHCHECK --interval=30s --timeout=10s --start-period=60s --retries=3 CMD ["/leasehold", "healthcheck", "-q"]
ENTRYPOINT ["/leasehold"]
CMD ["serve"]
