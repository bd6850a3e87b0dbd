# Sagaline: every job has a target. `make run` and `make test` work on a fresh clone:
# they install what they need (virtualenv, Kafka, PostgreSQL, Spark jars) themselves.
SHELL := /bin/bash
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
LOGS := .local/logs
STAMP := $(VENV)/.installed

.PHONY: install stack-up stack-down browser run stop demo test test-unit lint format bench faults clean

# The virtualenv, the Kafka Connect + Debezium jars (legacy CDC), the Spark rebuild's jars
# (for the pinned pyspark, checked against its own) and Jaeger v2 (the local trace backend,
# built once from the Go module proxy, ~6 minutes on 2 cores; a clone on a machine that built
# it copies the binary from the per-user cache): nothing downloads at run time, so
# `sagaline rebuild` works right after `make run`. (Kafka's jars come with kafka.sh start.)
install: $(STAMP)
	@deploy/local/connect.sh fetch
	@deploy/local/spark.sh fetch
	@deploy/local/jaeger.sh build

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]'
	touch $(STAMP)

# PostgreSQL, Kafka and Kafka Connect (Debezium on the legacy database) started; the Spark
# rebuild's jars come with install (once; never at run time).
stack-up: install
	deploy/local/stack.sh up

# Debian's headless Chromium and chromedriver, for the console's browser test (once).
browser:
	deploy/local/chromium.sh install

# Debian's docker-compose, to validate deploy/docker-compose.yml (no Docker engine needed):
# `make lint` runs its `config`, and so do the tests (once).
.PHONY: compose
compose:
	deploy/local/compose.sh install
test: compose
lint: compose

stack-down:
	deploy/local/stack.sh down
	deploy/local/jaeger.sh stop

# Tracing (SAGALINE_TRACING, in the environment or .env; OTEL_SDK_DISABLED wins): on, and with
# no collector named by OTEL_EXPORTER_OTLP_ENDPOINT / OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, the
# processes send their traces to OpenTelemetry's default endpoint, http://localhost:4318: the
# local Jaeger's OTLP/HTTP receiver, which `make run` starts (deploy/local/jaeger.sh).
TRACING_ON = $(BIN)/python -c 'import sys; from runtime.settings import Settings; from runtime.tracing import enabled_by_environment; sys.exit(0 if enabled_by_environment(Settings().tracing) else 1)'
TO_LOCAL_JAEGER = test -z "$${OTEL_EXPORTER_OTLP_ENDPOINT:-}$${OTEL_EXPORTER_OTLP_TRACES_ENDPOINT:-}"

# Start PostgreSQL (the legacy database), the broker and Kafka Connect with Debezium, create
# topics, migrate the read-model DB, start worker (legacy CDC on: it drives enrollments),
# projector and API in the background, then place a few demo orders and print their outcomes.
# With tracing on, Jaeger too (above), and where its UI is.
run: install
	deploy/local/postgres.sh start
	deploy/local/kafka.sh start
	deploy/local/connect.sh start
	mkdir -p $(LOGS)
	$(BIN)/sagaline topics create
	$(BIN)/sagaline db upgrade
	@echo "API key of this machine (.local/api-key; the API keeps only its hash, in .local/api-keys):"
	@$(BIN)/sagaline keys local
	@deploy/local/stop.sh $(LOGS) >/dev/null
	@if $(TRACING_ON) && $(TO_LOCAL_JAEGER); then deploy/local/jaeger.sh start; fi
	SAGALINE_CDC_ENABLED=true SAGALINE_CDC_DRIVES_ENROLLMENT=true \
	  nohup $(BIN)/sagaline worker > $(LOGS)/worker.log 2>&1 & echo $$! > $(LOGS)/worker.pid
	nohup $(BIN)/sagaline projector > $(LOGS)/projector.log 2>&1 & echo $$! > $(LOGS)/projector.pid
	nohup $(BIN)/sagaline api > $(LOGS)/api.log 2>&1 & echo $$! > $(LOGS)/api.pid
	$(BIN)/sagaline demo
	@echo
	@echo "Worker, projector and API keep running (logs in $(LOGS)/). API docs: http://127.0.0.1:8000/docs"
	@echo "Send the key above as 'Authorization: Bearer <key>'; 'sagaline keys --help' makes more."
	@echo "Legacy CDC is on: rows written to the legacy database (psql -h 127.0.0.1 -p 55432 -U sagaline legacy;"
	@echo "  schema school) become legacy.* events and enrollments (README, 'Legacy database (CDC)')."
	@echo "  Its password is generated, in .local/pg/pgpass: PGPASSFILE=.local/pg/pgpass psql ..., or deploy/local/postgres.sh psql -d legacy."
	@echo "Stop them and Kafka Connect with 'make stop'; stop Kafka and PostgreSQL with 'make stack-down'."
	@if ! $(TRACING_ON); then \
	  echo "Tracing is off (SAGALINE_TRACING=true turns it on: README, 'Traces')."; \
	elif $(TO_LOCAL_JAEGER); then \
	  echo "Tracing is on: traces in the local Jaeger, UI at $$(deploy/local/jaeger.sh url) (service sagaline-worker, sagaline-api, ...);"; \
	  echo "  'make stack-down' stops it (its traces are in memory only)."; \
	else \
	  echo "Tracing is on: traces to $${OTEL_EXPORTER_OTLP_TRACES_ENDPOINT:-$$OTEL_EXPORTER_OTLP_ENDPOINT}"; \
	fi

# SIGTERM, up to 12 s for a clean stop, then SIGKILL (and a line) for whatever remains; then
# the Kafka Connect worker (it commits its offsets and resumes from them on the next start).
stop:
	@deploy/local/stop.sh $(LOGS)
	@deploy/local/connect.sh stop

demo: install
	$(BIN)/sagaline demo

# The whole suite against real services: Kafka, PostgreSQL, Kafka Connect, Jaeger (the
# traces' tests) and Spark are started here, Chromium installed for the console's browser test.
test: install stack-up browser
	deploy/local/jaeger.sh start
	$(BIN)/python -m pytest -q -p no:cacheprovider

test-unit: install
	$(BIN)/python -m pytest -q -m unit

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/lint-imports
	$(BIN)/python -m scripts.check_declarations
	$(BIN)/python -m scripts.check_asyncapi
# The REST API's OpenAPI document under Spectral's spectral:oas rules (.spectral.yaml; its
# pinned CLI from npm into .local/spectral/ by deploy/local/spectral.sh): no error, no warning.
	$(BIN)/python -m scripts.export_openapi .local/openapi.json
	deploy/local/spectral.sh lint .local/openapi.json
	docker-compose -f deploy/docker-compose.yml --env-file deploy/.env.example config -q
# deploy/k8s: every manifest against Kubernetes 1.30's schemas (strict: an unknown field
# fails), offline; then checkov's scan (no finding left; each skip argued in its manifest),
# from its own virtualenv (pyproject.toml, the `scan` extra, says why), made once.
	$(BIN)/kubernetes-validate --kubernetes-version 1.30.0 --strict --quiet $(filter-out %/kustomization.yaml,$(wildcard deploy/k8s/*.yaml))
	test -x .local/scan-venv/bin/checkov || { $(PY) -m venv .local/scan-venv && .local/scan-venv/bin/pip install -q 'checkov>=3.2,<4'; }
	.local/scan-venv/bin/checkov --quiet --compact --skip-download -d deploy/k8s
# deploy/Dockerfile has no HEALTHCHECK, rightly: one image is the worker, the projector, the
# API and one-shot commands (no one check fits them all), and Kubernetes ignores it (the
# manifests' probes are what count).
	.local/scan-venv/bin/checkov --quiet --compact --skip-download -f deploy/Dockerfile --skip-check CKV_DOCKER_2

format: install
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

bench: install
	deploy/local/kafka.sh start
	$(BIN)/python -m benchmarks.bench_sagas
	deploy/local/postgres.sh start
	$(BIN)/python -m benchmarks.bench_projector

# The fault harness (RELIABILITY.md): its own broker on SAGALINE_FAULTS_KAFKA_PORT (19492),
# a PostgreSQL database of its own per cycle on the server tests use (make stack-up starts it).
# WORKERS: worker processes in one consumer group; STANDBYS: their table standby replicas
# (empty: SAGALINE_TABLE_STANDBY_REPLICAS's default).
CYCLES ?= 30
WORKERS ?= 1
STANDBYS ?=
faults: install
	$(BIN)/python -m faults --cycles $(CYCLES) --workers $(WORKERS) $(if $(STANDBYS),--standbys $(STANDBYS))

clean: stop
	rm -rf .local/worker-data .local/logs .local/sagaline.db*
