# A static sluice binary on a minimal, non-root image. The spec is mounted
# at /etc/sluice/sluice.yaml; a local destination writes under /var/lib/sluice.
#
#   docker build -t sluice .
#   docker run --rm -v $PWD/sluice.yaml:/etc/sluice/sluice.yaml:ro -p 9090:9090 sluice run --metrics-addr :9090
FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -buildvcs=auto -trimpath -ldflags="-s -w" -o /out/sluice ./cmd/sluice

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/sluice /usr/local/bin/sluice
WORKDIR /var/lib/sluice
USER nonroot:nonroot
EXPOSE 9090
ENTRYPOINT ["/usr/local/bin/sluice", "-f", "/etc/sluice/sluice.yaml"]
CMD ["run", "--metrics-addr", ":9090"]
