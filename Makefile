# The front door: `make help` lists what is here.
SHELL := /usr/bin/env bash
GO ?= go
SQLC_VERSION := v1.31.1
SQLC := $(GO) run github.com/sqlc-dev/sqlc/cmd/sqlc@$(SQLC_VERSION)
GOLANGCI_LINT_VERSION := v2.15.0
GOLANGCI_LINT := $(GO) run github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION)
BIN := bin/orchestrator

.DEFAULT_GOAL := help

.PHONY: help
help: ## List the targets
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z_-]+:.*## / {printf "  %-16s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

.PHONY: setup
setup: ## Install what make run needs and is missing: PostgreSQL, libvips, poppler, tesseract, gcc (scripts/setup.sh; apt-get or Homebrew)
	@scripts/setup.sh run

.PHONY: setup-test
setup-test: ## Install what make test needs and is missing: setup's, plus the vips tools, Chromium, and curl, jq and the AWS CLI (the docs' commands)
	@scripts/setup.sh test

.PHONY: run
run: build ## Install what is missing, then start the orchestrator on embedded defaults (local Postgres, local S3, local machine runner, tesseract for OCR); prints its URLs and tokens
	LISTEN_ADDR=$${LISTEN_ADDR:-127.0.0.1:8080} scripts/postgres.sh dev $(BIN) serve

.PHONY: test
test: setup-test ## Install what is missing, then run every test with -race against real Postgres (a throwaway cluster unless TEST_DATABASE_URL/DATABASE_URL is set)
	scripts/postgres.sh temp $(GO) test -race -count=1 ./...

# The fuzz targets: `make test` runs their seed corpora, `make fuzz` each
# for FUZZTIME beyond them.
FUZZTIME ?= 30s
FUZZ_TARGETS := ./fanin:FuzzParseCallback ./manifest:FuzzParseQueueMessage ./manifest:FuzzParseManifest \
	./textchunk:FuzzSplit ./worker/tiffworker:FuzzReadDirectories ./phases:FuzzCheckKey ./batchurls:FuzzCheck \
	./intakesig:FuzzVerify ./blob:FuzzParseCompact

.PHONY: fuzz
fuzz: setup ## Fuzz each target (TIFF directories, keys and URL scope, intake signatures, compact URLs, callbacks, manifests, chunking) for FUZZTIME (30s) beyond its seed corpus, which make test runs
	@for t in $(FUZZ_TARGETS); do \
		echo "== $${t#*:} ($${t%%:*})"; \
		$(GO) test -run '^$$' -fuzz "^$${t#*:}\$$" -fuzztime $(FUZZTIME) "$${t%%:*}" || exit 1; \
	done

.PHONY: test-short
test-short: setup-test ## Run the fast tests, without -race (skips the end-to-end and load tests that testing.Short() marks)
	scripts/postgres.sh temp $(GO) test -short -count=1 ./...

.PHONY: bench
bench: setup-test ## Benchmarks (callback ingest vs pgbench, end to end at 1k/10k/100k files with a 20-file high-priority batch's latency during the largest, workers vs vips CLI, OCR by two processes against providers of 8, 50 and 200 requests/s, documents through their steps and search, pools vs a machine per task under Fly's creation limit); writes BENCHMARKS.md
	scripts/postgres.sh bench $(GO) run ./cmd/bench -out BENCHMARKS.md

.PHONY: chaos
chaos: setup ## Chaos test (CHAOS.md): 20 batches of 200 files through two orchestrators under kill -9, Postgres restarts, Fly, S3 and provider outages and bad machines, some through OCR and documents; prints the table. CHAOS_FLAGS adds flags (e.g. -seed N)
	$(GO) run ./cmd/chaos $(CHAOS_FLAGS)

.PHONY: chaos-short
chaos-short: setup ## The chaos test's short form that CI runs: 4 batches of 50 files, 10 s outages (a few minutes)
	$(GO) run ./cmd/chaos -short $(CHAOS_FLAGS)

.PHONY: upgrade-test
upgrade-test: setup ## Rolling upgrade test (docs/operations.md#upgrades): batches started on the previous release (scripts/upgrade-from, or UPGRADE_FROM), its orchestrators upgraded to this checkout one by one mid-batch; every batch must end DONE with every file processed (about 2 minutes; CI runs it)
	$(GO) run ./cmd/chaos -upgrade $(CHAOS_FLAGS)

.PHONY: build
build: setup ## Build bin/orchestrator and bin/worker (the worker needs libvips)
	$(GO) build -o $(BIN) ./cmd/orchestrator
	$(GO) build -o bin/worker ./cmd/worker

.PHONY: migrate
migrate: ## Apply database migrations to DATABASE_URL (or the local development cluster)
	scripts/postgres.sh dev $(GO) run ./cmd/orchestrator migrate

.PHONY: submit
submit: ## Submit examples/sample-batch to the orchestrator `make run` started (it finds it through .data/run.env)
	$(GO) run ./cmd/orchestrator submit examples/sample-batch

.PHONY: generate
generate: ## Regenerate db/ from sql/ (sqlc), what derives from phases/ (cmd/worker's programs, the OpenAPI status enum) and docs/configuration.md from the settings' declarations
	$(SQLC) generate
	$(GO) run ./cmd/gen

.PHONY: check-generate
check-generate: ## Fail when the committed generated code is stale
	$(SQLC) diff
	$(GO) run ./cmd/gen -check

.PHONY: lint
lint: ## gofmt, then golangci-lint (errcheck, govet, staticcheck, unused, revive, nolintlint...: .golangci.yml)
	@out=$$(gofmt -l $$(git ls-files --cached --others --exclude-standard '*.go')); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GOLANGCI_LINT) run ./...

.PHONY: clean
clean: ## Remove build output (keeps the development database, tokens and objects of .data/)
	rm -rf bin
