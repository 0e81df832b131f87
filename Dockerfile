# The orchestrator image: `orchestrator serve` on port 8080, with the worker
# program beside it, so that without FLY_API_TOKEN the local machine runner
# runs each task's worker as a process of this container (what
# docker-compose.yml does). On Fly the machines run the worker images
# (Dockerfile.*-worker) instead, and the worker here is unused.
FROM golang:1.26-bookworm AS build
RUN apt-get update \
 && apt-get install -y --no-install-recommends libvips-dev pkg-config \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -o /out/orchestrator ./cmd/orchestrator
# cgo: the worker calls libvips (and libtiff) directly.
RUN CGO_ENABLED=1 go build -trimpath -ldflags="-s -w" -o /out/worker ./cmd/worker

# The same Debian release as the build stage, so the libvips the worker was
# built against (8.14) is the one it runs with. libvips42 brings its poppler
# module (pdfload); poppler-utils brings pdfinfo and pdftotext; tesseract-ocr
# (with its English data) is the OCR phase's local engine when no
# OCR_API_URL is set; curl is for the health check (GET /healthz).
FROM debian:bookworm-slim
RUN apt-get update \
 && apt-get install -y --no-install-recommends libvips42 poppler-utils tesseract-ocr tesseract-ocr-eng ca-certificates curl \
 && rm -rf /var/lib/apt/lists/*
COPY --from=build /out/orchestrator /out/worker /usr/local/bin/
ENV LISTEN_ADDR=:8080 \
    LOCAL_WORKER_BIN=/usr/local/bin/worker
# Workers download to TMPDIR (/tmp); nothing else is written.
USER nobody
EXPOSE 8080
ENTRYPOINT ["/usr/local/bin/orchestrator"]
CMD ["serve"]
