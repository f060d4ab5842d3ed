# Multi-stage build of the leasehold node: a static binary (pure-Go SQLite,
# no cgo) in an image with nothing else, run as a non-root user.
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=docker
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.Version=${VERSION}" -o /out/leasehold ./cmd/leasehold \
    && mkdir -p /out/data

FROM scratch
COPY --from=build /out/leasehold /leasehold
COPY --from=build --chown=65532:65532 /out/data /data
USER 65532:65532
VOLUME /data
EXPOSE 8080 4222
# SQLite's rare temporary files go beside the catalog; scratch has no /tmp.
# The embedded NATS server listens for peers beyond the container too.
ENV LEASEHOLD_DATA=/data LEASEHOLD_LISTEN=0.0.0.0:8080 LEASEHOLD_NATS_LISTEN=0.0.0.0:4222 TMPDIR=/data
ENTRYPOINT ["/leasehold"]
CMD ["serve"]
