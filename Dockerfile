# Capstan worker and dispatcher: static binaries on a distroless base, run as
# a non-root user. Build: docker build -t capstan:dev .
# The image's entrypoint is the worker; run the dispatcher with
#   docker run --entrypoint /usr/local/bin/dispatcher capstan:dev help

FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
# Built with cgo, statically: the process sandbox's fast path (the zygote, a
# small C fork server, docs/capabilities.md) needs it; the dispatcher's local
# mode runs a worker pool too. netgo and osusergo keep the C library's name
# services out, so the static glibc link is complete.
ENV CGO_ENABLED=1
RUN go build -tags netgo,osusergo -trimpath -ldflags="-s -w -extldflags=-static" -o /out/worker ./cmd/worker \
 && go build -tags netgo,osusergo -trimpath -ldflags="-s -w -extldflags=-static" -o /out/dispatcher ./cmd/dispatcher

# distroless/static: no shell, no package manager, CA certificates and a
# "nonroot" user (uid 65532). Tools that run processes find no binaries here:
# build an image on another base for those.
FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/worker /out/dispatcher /usr/local/bin/
COPY examples /opt/capstan/examples
WORKDIR /opt/capstan
USER nonroot:nonroot
ENV CAPSTAN_HTTP_ADDR=0.0.0.0:9464 \
    CAPSTAN_DATA_DIR=/tmp/capstan
EXPOSE 9464
ENTRYPOINT ["/usr/local/bin/worker"]
