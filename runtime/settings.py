"""Every setting of Sagaline, read from ``SAGALINE_*`` environment variables (or ``.env``).

Entrypoints call :func:`get_settings`; nothing reads the environment at import time.
The README's settings table documents each field below.
"""

from __future__ import annotations

import json
from decimal import Decimal
from functools import lru_cache
from pathlib import Path
from typing import Literal

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict
from sqlalchemy.engine import make_url

KafkaProtocol = Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"]
SaslMechanism = Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]
SparkLogLevel = Literal["ALL", "TRACE", "DEBUG", "INFO", "WARN", "ERROR", "FATAL", "OFF"]

SPARK_CONF_GIVEN_BY = {
    "spark.master": "spark_master",
    "spark.driver.memory": "spark_driver_memory",
    "spark.sql.shuffle.partitions": "spark_shuffle_partitions",
    "spark.jars": "spark_jars_dir",
    "spark.driver.extraJavaOptions": "spark_jvm_options",
    "spark.executor.extraJavaOptions": "spark_jvm_options",
}
"""The Spark settings the rebuild's session takes from a setting (each from the field named;
spark.jars from the jars in that directory): SAGALINE_SPARK_CONF may not set them."""

SPARK_CONF_RELIED_ON = {
    "spark.sql.ansi.enabled": "the job's casts and indexes are written for ANSI mode",
    "spark.sql.session.timeZone": "the job reads and writes every time in UTC",
}
"""Spark settings the rebuild's results rest on: SAGALINE_SPARK_CONF may not change them."""

UTC_JVM = "-Duser.timezone=UTC"
"""Times reach JDBC as java.sql.Timestamp, read in the JVM's zone: the JVM must run in UTC."""


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="SAGALINE_", env_file=".env", extra="ignore")

    kafka_bootstrap: str = Field(
        "127.0.0.1:9092", description="Kafka bootstrap servers (host:port[,host:port])"
    )
    topic_prefix: str = Field(
        "sagaline",
        description="Prefix of every topic name; lets several deployments share a cluster",
    )
    partitions: int = Field(
        8,
        ge=1,
        description="Partitions of every topic, fixed at `topics create`; the worker refuses to start on a mismatch",
    )
    replication_factor: int = Field(1, ge=1, description="Replication factor of created topics")
    event_retention_ms: int = Field(
        -1,
        description="Retention of the domain-event topic (-1: forever; the rebuild reads it from the start)",
    )
    command_retention_ms: int = Field(
        7 * 24 * 3600 * 1000, description="Retention of command and reply topics"
    )
    kafka_security_protocol: KafkaProtocol = Field(
        "PLAINTEXT",
        description="How every Kafka client (worker, API, projector, rebuild, CLI) reaches the brokers: PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL",
    )
    kafka_sasl_mechanism: SaslMechanism = Field(
        "SCRAM-SHA-512",
        description="SASL mechanism under a SASL_* protocol: PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512",
    )
    kafka_sasl_username: str = Field(
        "", description="SASL user name; required under a SASL_* protocol"
    )
    kafka_sasl_password: SecretStr | None = Field(
        None,
        description="SASL password (or SAGALINE_KAFKA_SASL_PASSWORD_FILE; exactly one under a SASL_* protocol); never logged",
    )
    kafka_sasl_password_file: Path | None = Field(
        None,
        description="File holding the SASL password (its first line), read when a client starts; e.g. a mounted Kubernetes secret",
    )
    kafka_ssl_cafile: Path | None = Field(
        None,
        description="PEM file of the CA(s) that signed the brokers' certificates (SSL, SASL_SSL); default: the system's trust store",
    )
    kafka_ssl_certfile: Path | None = Field(
        None,
        description="PEM client certificate, for brokers that require TLS client authentication (with SAGALINE_KAFKA_SSL_KEYFILE)",
    )
    kafka_ssl_keyfile: Path | None = Field(
        None, description="PEM private key of SAGALINE_KAFKA_SSL_CERTFILE"
    )

    app_id: str = Field(
        "sagaline", description="Faust application id: consumer group and changelog topic prefix"
    )
    store: Literal["rocksdb", "memory"] = Field(
        "rocksdb", description="Faust table store; `memory` keeps state in the heap (tests only)"
    )
    data_dir: Path = Field(
        Path(".local/worker-data"), description="Where the worker keeps its RocksDB tables"
    )
    rocksdb_write_buffer_mb: int = Field(
        4,
        ge=1,
        description="RocksDB memtable size per table partition (two are kept); all memtables together are held to half of SAGALINE_ROCKSDB_MEMORY_MB, flushed early when they reach it",
    )
    rocksdb_memory_mb: int = Field(
        64,
        ge=4,
        description="Memory budget shared by every RocksDB the worker process opens, whatever the number of tables and partitions: one block cache of this size, charged with the memtables (up to half of it) and the index and filter blocks, so what RocksDB holds in memory stays near it (a soft limit: the cache may overshoot briefly, writers are not stalled). Not in it: SST files on disk, the Python heap, memory glibc keeps on its free lists. Give it 1 MiB or more per table partition the worker may open (each open memtable takes a few hundred KiB at least). 64 MiB: 32 for memtables (the 30-minute soak held 12-15 MiB of them with 1 MiB write buffers, at an unchanged rate) and 32 for blocks (the SST files were 13 MiB after 30,000 sagas); BENCHMARKS.md, worker memory",
    )
    worker_web_port: int = Field(
        6066,
        description="Port of the worker's Faust web server (Prometheus metrics at /metrics, JSON counters at /sagaline/metrics)",
    )
    producer_linger_ms: float = Field(
        0.0,
        ge=0,
        description="How long the worker's producer waits to batch records into one request (adds that much latency per hop)",
    )
    session_timeout_s: float = Field(
        10.0,
        ge=6,
        description="Consumer-group session timeout: how soon a dead worker's partitions move to a live one (the worker heartbeats every tenth of it)",
    )
    # Standbys: each table partition is also kept, read from its changelog as it is written,
    # by this many other workers, so a dead worker's partitions move to one that holds them
    # already and recovers only the changelog's tail (the assignor places a standby only on
    # another worker than the partition's active one). 1, Faust's own default: with one
    # worker it costs nothing (there is nowhere to put it); with several, every partition
    # has one standby, which costs each worker a second copy of the tables it stands by for
    # (disk, memory inside SAGALINE_ROCKSDB_MEMORY_MB) and reading their changelogs as
    # they grow (CPU and broker reads; README, "Capacity"). 2 only survives two workers
    # lost at once, at twice that.
    # 1 again since the three defects the three-worker harness found in standbys were fixed
    # (RELIABILITY.md, "Three workers under the harness"); it held 30 cycles with them.
    table_standby_replicas: int = Field(
        1,
        ge=0,
        description="Standby copies of each table partition kept by other workers (Faust's table_standby_replicas), so a dead worker's partitions move to a worker that already holds them (README, \"Capacity\"); no cost with one worker",
    )
    batch_size: int = Field(
        200, ge=1, description="Records an agent decides before it sends and stores them together"
    )
    batch_within_ms: int = Field(
        0,
        ge=0,
        description="How long an agent batch waits for more records after its first one (0: it takes what is queued)",
    )
    # On: the standby stores that skipped changelog records with it on (RELIABILITY.md,
    # defect 10) were Faust's consumer dropping a batch aiokafka drained, fixed in the seam;
    # the sessions only made the window likelier. 30 harness cycles with it on since: clean.
    fetch_sessions: bool = Field(
        True,
        description="Fetch in Kafka's incremental fetch sessions (KIP-227): each fetch request lists only the partitions that changed and each response only those with records, instead of every assigned partition both ways (services/worker/fetch_sessions.py): 15-28% less worker CPU a saga and 9-26% less broker CPU at 40 sagas/s, nothing at full load (BENCHMARKS.md, issue 27). false: aiokafka's own full fetches",
    )
    # Off: the consumer on the worker's own loop saves the two thread crossings of every
    # fetch (services/worker/faust_seam.py, consumer_on_the_app_loop); on is Faust's design,
    # kept for a deployment whose sagas hold the loop for seconds.
    consumer_thread: bool = Field(
        False,
        description="Run Faust's Kafka consumer in a thread of its own with a second event loop (Faust's design), instead of on the worker's event loop: on, heartbeats go on while a decision holds the loop for seconds, at about a tenth more worker CPU below full load (BENCHMARKS.md, issue 27, lever 4)",
    )
    # A minute: far beyond a batch's time or a deadline index rebuild, short of an operator
    # noticing from the lag panel alone; a rebalance restarts the clock (a new owner reads
    # its changelogs before it processes anything).
    stall_after_s: float = Field(
        60.0,
        gt=0,
        description="An owned input partition with records waiting that has not moved for this long is logged once as stalled (ERROR), once when it moves again, and counted in sagaline_worker_stalled_partitions (services/worker/stalls.py)",
    )
    # 100 ms: at 90 sagas/s over three workers it took a fifth of their CPU and a quarter
    # to a third of p50 (BENCHMARKS.md, "Stores that span batches, on by default"). A span
    # also delays a standby's copy and a deadline's scheduling by up to its length, so it
    # stays short; longer ones were not measured.
    store_every_ms: int = Field(
        100,
        ge=0,
        le=5_000,
        description="How long a worker may hold decided states before storing them, so that the batches of that span are stored in one changelog write; 0: every batch's states are stored before the next batch. Outputs are sent and acknowledged batch by batch either way, so a crash within a span only decides its records again into the same messages (services/worker/runner.py; RELIABILITY.md, section Stores that span batches)",
    )
    deadline_poll_ms: int = Field(
        200, ge=10, description="How often the worker checks for due deadlines"
    )
    metrics_log_s: float = Field(30.0, gt=0, description="How often the worker logs its counters")
    seen_window: int = Field(
        500, ge=10, description="Processed message ids remembered per key, for dedupe"
    )
    max_message_bytes: int = Field(
        512 * 1024,
        ge=10_000,
        le=512 * 1024,
        description="Largest record the worker produces; a decision whose message would be larger is dead-lettered instead of stalling its stream (at most the 512 KiB every Sagaline consumer accepts, well under the producer's 1 MiB request size)",
    )
    start_without_position: Literal["earliest", "committed"] = Field(
        "earliest",
        description="Where the worker starts an input partition for which its table holds no position (no batch ever stored there): `earliest`, or `committed` (the consumer group's offset) once, when upgrading from a version that stored no positions",
    )
    deadletter_inline_max_bytes: int = Field(
        256 * 1024,
        ge=1024,
        le=450 * 1024,
        description="A dead letter carries the original key and value inline up to this size (JSON-encoded); larger ones are named by size and SHA-256 and stay in their source topic at the letter's partition and offset (keeps every letter under the producer's 1 MB max request size)",
    )
    worker_web_host: str = Field(
        "127.0.0.1",
        description="Address the worker's Faust web server binds (its `/metrics` needs no key: keep it private; `0.0.0.0` in a container a Prometheus scrapes)",
    )
    state_cache_keys: int = Field(
        2_000,
        ge=0,
        description="Decoded table states the worker keeps in memory per process, so a key's record is not parsed from JSON for every message (0: no cache). Enough for the sagas in flight and the hot entities; every cached state is long-lived to Python's garbage collector, and 10,000 made a 200 ms collection during a run's first minute at 300 sagas/s (BENCHMARKS.md, issue 11, seventh step)",
    )
    worker_memory_metrics: bool = Field(
        False,
        description="Opt-in diagnostic: the worker's /metrics also reports RocksDB's memory by kind (memtables, table readers, block cache), live Python allocator blocks and glibc malloc bytes, read at each scrape (see services/worker/memory.py)",
    )
    deadline_rescan_s: float = Field(
        600.0,
        ge=0,
        description="How often the worker also rebuilds its deadline index from its tables, a safety net only (the index is fed by every stored batch and rebuilt after every rebalance; why nothing should escape it: services/worker/deadlines.py). It reads the index entries the tables keep beside the records, those due within the next minute (the live work: never the finished records or the retired markers), in slices that let batches run; a deadline it alone would find fires at most this late. 0: never",
    )

    step_timeout_s: float = Field(
        30.0, gt=0, description="A saga step's deadline for a participant's answer"
    )
    reservation_ttl_s: float = Field(
        300.0, gt=0, description="How long a reservation is held without confirmation"
    )
    payment_decline_methods: str = Field(
        "decline", description="Comma-separated payment methods the simulated gateway declines"
    )
    payment_silent_methods: str = Field(
        "",
        description="Comma-separated payment methods the simulated gateway never answers (to exercise timeouts); empty in production",
    )
    payment_max_amount: Decimal = Field(
        Decimal("10000"), description="Orders above this amount are declined"
    )
    dedupe_retention_s: float = Field(
        600.0,
        gt=0,
        description="How long a participant (stock, seats, credits) remembers a reservation it finished, to answer a repeated or late command about it the same way; older ones are forgotten, so a hot key's record does not grow with its history. Keep it well above SAGALINE_STEP_TIMEOUT_S and SAGALINE_RESERVATION_TTL_S (why: sagas/machinery/reservations.py, `Retention`)",
    )
    # Retirement (sagas/machinery/retirement.py). A final record must outlive every message
    # that can still reach it and change something: a participant's answer or a saga's
    # compensation comes within a step timeout (30 s) of the step that asked for it, an
    # expired hold's Released within a reservation TTL (5 min), and a participant repeats
    # its answers about a reservation for SAGALINE_DEDUPE_RETENTION_S (10 min). An hour is
    # six times the longest of them, so what meets the marker instead of the record is only
    # a redelivery or a replay, never a reply the saga or the payment still needed (a Void
    # after a capture, which refunds it). It also keeps a finished saga's key for an hour of
    # operator lookups in the table. Records within it cost their size; an hour at 300
    # sagas/s is ~1M order and payment records.
    retire_after_s: float = Field(
        3600.0,
        gt=0,
        description="How long a record that can no longer change (a saga in a final status, a payment captured, declined or voided, an idle CDC transaction or action) is kept before it retires: replaced by a small marker, its history chunks deleted. Keep it well above SAGALINE_STEP_TIMEOUT_S, SAGALINE_RESERVATION_TTL_S and SAGALINE_DEDUPE_RETENTION_S (why: runtime/settings.py). Stock, courses and students never retire",
    )
    # The marker outlives the record so that a command redelivered or replayed for a retired
    # saga id is dropped, not taken for a new saga: a producer's retries end within minutes,
    # an API client's retry of the same request and a dead letter re-driven by an operator
    # come within the day the projector keeps its receipts (SAGALINE_RECEIPT_RETENTION_H,
    # 24 h). A day of markers is ~250 bytes each: ~13 GB of RocksDB at 300 orders/s
    # sustained (order and payment), a few MB at the demo's rates. After it the id is new
    # again (the README's guarantees: like Temporal's workflow-id reuse policy).
    retired_marker_s: float = Field(
        86400.0,
        gt=0,
        description="How long a retired key's marker is kept (then the key is deleted): within it every message for the key is dropped (a redelivered PlaceOrder starts nothing); after it the id is unknown again and a command for it starts anew",
    )

    api_host: str = Field("127.0.0.1", description="Address the REST API listens on")
    api_port: int = Field(8000, description="Port of the REST API")
    database_url: str = Field(
        "sqlite:///.local/sagaline.db", description="SQLAlchemy URL of the read-model database"
    )
    log_level: str = Field("INFO", description="Log level of every component")
    kafka_startup_wait_s: float = Field(
        60.0,
        ge=0,
        description="How long a worker, projector or API started while no broker answers keeps trying (pauses of 1 s doubling to 10 s) before it exits; a broker that answers and refuses (login, TLS) ends the start at once. 0: exit at once",
    )
    database_startup_wait_s: float = Field(
        60.0,
        ge=0,
        description="How long a projector started while its read-model database does not answer (or is still starting) keeps trying, with the pauses of SAGALINE_KAFKA_STARTUP_WAIT_S, before it exits; a database that refuses (login, no such database) ends the start at once. The API does not wait: it starts and answers reads 503 until the database answers. 0: exit at once",
    )
    shutdown_grace_s: float = Field(
        8.0,
        gt=0,
        description="After SIGTERM/SIGINT, how long the worker, projector, API and rebuild may take to stop cleanly before they exit anyway (code 75, one line saying what was left undone)",
    )
    gc_threshold: int = Field(
        50_000,
        ge=0,
        description="Net allocations between two collections of Python's youngest garbage-collector generation, in the worker, projector and API (Python's default is 700, which cost the worker a quarter of its time at full load; see runtime/gc_tuning.py). 0 keeps Python's",
    )
    gc_freeze: bool = Field(
        True,
        description="Move what start-up built into a generation the garbage collector never walks again (gc.freeze), so full collections walk only what came after",
    )
    api_max_body_bytes: int = Field(
        65536,
        ge=1,
        description="Largest request body the REST API reads; a longer one (by Content-Length or counted while it streams) is answered 413 before it is parsed",
    )
    database_password_file: Path | None = Field(
        None,
        description="File holding the read-model database's password (its first line), for a SAGALINE_DATABASE_URL written without one; the only other place a password may be is the URL",
    )
    api_auth: bool = Field(
        True,
        description="Require an API key on every route but /healthz; `false` opens every route to anyone who reaches the API (logged as a warning at start)",
    )
    api_keys_file: Path = Field(
        Path(".local/api-keys"),
        description="The API's key file: one salted hash per line (`sagaline keys create|list|revoke` edit it; re-read when it changes)",
    )
    api_keys: str = Field(
        "",
        description="More API keys, as key-file lines separated by `;` (hashes, never keys); for deployments that pass secrets as variables",
    )
    api_rate_per_s: float = Field(
        0.0,
        ge=0,
        description="Commands per second each API key may send (a token bucket per key, per API process); over it: 429 with Retry-After. 0: no limit",
    )
    api_rate_burst: int = Field(
        20,
        ge=1,
        description="Commands a key may send at once before SAGALINE_API_RATE_PER_S paces it (the bucket's size)",
    )
    api_key_failures_per_s: float = Field(
        1.0,
        gt=0,
        description="Keys that were not valid one client address may present per second, once its SAGALINE_API_KEY_FAILURES_BURST is spent (each costs an scrypt run, ~70 ms and 16 MiB); past it a key this API process has not verified before is a 429 with Retry-After, checked by no scrypt run. Per API process; behind a proxy every client shares the proxy's address",
    )
    api_key_failures_burst: int = Field(
        20,
        ge=1,
        description="Keys that were not valid one client address may present at once before SAGALINE_API_KEY_FAILURES_PER_S paces it (the bucket's size; a key that passes its check gives its token back)",
    )
    api_key_checks_at_once: int = Field(
        4,
        ge=1,
        description="scrypt checks of presented keys one API process runs at once (in threads; ~16 MiB each): a key it has not verified before, or a wrong one; one more is a 429 with Retry-After. Keys verified before are recognised without scrypt",
    )
    api_idempotency_keys: int = Field(
        100_000,
        ge=1,
        description="Idempotency-Keys each API process remembers with a fingerprint of their request (about 250 bytes each), to answer the same key with a different body 422; the oldest is forgotten first. Ids derive from the key and the caller whether remembered or not, so a retry gets the same order in any process",
    )
    api_workers: int = Field(
        1,
        ge=1,
        description="API processes behind the one port (uvicorn workers); each has its own command producer, key ring (each re-reads the key file), rate buckets (so N processes allow N x SAGALINE_API_RATE_PER_S per key) and /metrics",
    )
    api_access_log: bool = Field(
        False,
        description="Log a line per HTTP request (uvicorn's access log); off by default: /metrics counts requests by route and status, and the line costs about a third of the API's CPU per POST /orders (bench_api)",
    )
    api_producer_linger_ms: float = Field(
        0.0,
        ge=0,
        description="How long the command producer of the API (and CLI) waits for more commands to share a produce request; 0 still batches, as commands queue while the previous request to a broker is in flight (bench_api: 0 and 1 ms the same within the noise, 5 ms worse; adds at most that much to a 202)",
    )
    api_producer_max_batch_bytes: int = Field(
        16384,
        ge=1024,
        description="Largest batch of commands per partition in one produce request of the API's producer",
    )
    api_opentelemetry: bool = Field(
        False,
        description="FastAPI's built-in OpenTelemetry spans, metrics and logs, for a process with an OpenTelemetry SDK configured; off: a request skips the provider check (Sagaline reports through /metrics)",
    )
    console_session_idle_s: float = Field(
        1800.0,
        gt=0,
        description="A console session unused this long is ended (the operator logs in again)",
    )
    console_session_max_s: float = Field(
        43200.0,
        gt=0,
        description="A console session ends this long after its login, however busy",
    )
    console_sessions_max: int = Field(
        1000,
        ge=1,
        description="Most open console sessions; a login past it ends the least recently used",
    )
    console_sessions_dir: Path = Field(
        Path(".local/console-sessions"),
        description="Where the API keeps console sessions (a file per session: key id, scopes, form token; never the key), shared by the processes of SAGALINE_API_WORKERS; relative to the working directory",
    )
    console_cookie_secure: bool | None = Field(
        None,
        description="Mark the console's cookie `Secure` (sent over https only); unset: on unless SAGALINE_API_HOST is a loopback address",
    )
    in_flight_refresh_s: float = Field(
        60.0,
        gt=0,
        description="At most how often each API process reads the saga tables' changelogs (in a thread) for the in-flight sagas by type and version on its /metrics and the console's overview; between readings both show the last one. Each reading reads every saga table whole, so not at each scrape; a minute is soon enough to see an old version's last instance finish, which takes hours",
    )
    console_deadletters_page: int = Field(
        50,
        ge=1,
        le=500,
        description="Dead letters the console reads and shows per page (newest first, an `older` link for the next)",
    )

    projector_batch_size: int = Field(
        2000,
        ge=1,
        description="Most domain events the projector applies in one database transaction",
    )
    # Why 50 ms: at a few hundred events a second a fetch returns a handful, and each one
    # costs a database transaction (its commit and fsync) and Kafka requests whatever its
    # size; waiting lets aiokafka's fetcher fill its buffer, so one transaction takes what
    # arrived meanwhile. BENCHMARKS.md ("The projector's linger") measured the CPU it saves;
    # read models (and consistency tokens) lag by up to this much more.
    projector_linger_ms: int = Field(
        50,
        ge=0,
        le=10_000,
        description="After a batch smaller than SAGALINE_PROJECTOR_BATCH_SIZE, how long the projector waits before reading the next, so that below full load it applies fewer, larger transactions; read models and consistency tokens lag by up to this much more. 0: read again at once",
    )
    projector_commit_delay_ms: int = Field(
        0,
        ge=0,
        description="Pause inside every projector transaction before it commits; only for crash tests (0 in production)",
    )
    projector_group_id: str = Field(
        "",
        description="Kafka consumer group of the projector processes of one read-model database (empty: `<SAGALINE_APP_ID>-projector`); the processes of one group split the event topic's partitions, so projectors feeding two databases need two groups",
    )
    gap_alert_s: float = Field(
        60.0,
        gt=0,
        description="An event held behind a sequence gap longer than this is logged and flagged in /projections/status",
    )
    receipt_retention_h: float = Field(
        24.0,
        gt=0,
        description="How long the projector keeps command receipts (what consistency tokens wait for)",
    )
    # A finished saga's rows (its model row, timeline, own streams' positions) are kept a
    # week: as long as the command topics keep a command (SAGALINE_COMMAND_RETENTION_MS, 7
    # days), so a client or an operator holding anything that names a saga -- its id, a
    # token, a command still on its topic -- finds it; and far longer than the worker
    # remembers it (SAGALINE_RETIRE_AFTER_S + SAGALINE_RETIRED_MARKER_S, 25 h), so the read
    # side never forgets a saga the worker still answers for. A week at 300 sagas/s held is
    # ~180M sagas (13 rows each); at such rates shorten it. The whole story stays on the
    # event topic for the rebuild's analytics (readside/retention.py says what goes).
    read_retention_s: float = Field(
        7 * 24 * 3600.0,
        ge=0,
        description="How long the read side keeps a saga that is final: then its row, its timeline and its own streams' positions (order:<id>, payment:<id>) are deleted, in bounded batches, by the projector (and the rebuild leaves them out); a GET for it answers 404 after that. Entities (stock, courses, students, accounts) stay. 0: keep every saga (why a week: runtime/settings.py)",
    )
    read_poll_ms: int = Field(
        50,
        ge=5,
        description="How often the API checks the read models while a request waits for a token or a final status",
    )
    projector_metrics_host: str = Field(
        "127.0.0.1",
        description="Address the projector serves its Prometheus metrics on (`/metrics`)",
    )
    projector_metrics_port: int = Field(
        6067,
        ge=0,
        le=65535,
        description="Port of the projector's Prometheus metrics (`http://<host>:<port>/metrics`); 0: not served",
    )
    log_format: Literal["text", "json"] = Field(
        "text",
        description="Log lines as text, or `json`: one JSON object per line with saga_id, message_id, causation_id, topic, partition and offset wherever they are known",
    )
    tracing: bool = Field(
        False,
        description="OpenTelemetry traces of every component (API, worker, projector, rebuild, CLI), W3C trace context in every record's headers: configured by OpenTelemetry's own variables (`OTEL_EXPORTER_OTLP_ENDPOINT`, default http://localhost:4318; `OTEL_TRACES_SAMPLER`/`_ARG`; `OTEL_SERVICE_NAME`; `OTEL_TRACES_EXPORTER` otlp, console or none; `OTEL_SDK_DISABLED`); off: no span, context nor header is built",
    )
    tracing_ui_url: str = Field(
        "http://127.0.0.1:16686",
        description="Base URL of the trace UI (Jaeger's) the console's saga page links to when SAGALINE_TRACING is on: a search of the worker's spans (service `sagaline-worker`) tagged with the saga's id, over the time of its steps; empty: no link",
    )

    # --- the nightly Spark rebuild (spark_projections, `sagaline rebuild`) -------------
    spark_master: str = Field(
        "local[2]",
        description="Spark master of `sagaline rebuild` (ignored under spark-submit, which sets its own)",
    )
    spark_driver_memory: str = Field(
        "1g",
        description="Heap of the rebuild's Spark driver (in local mode the executors share it); the job never collects the topic, so this stays small",
    )
    spark_shuffle_partitions: int = Field(
        8, ge=1, description="spark.sql.shuffle.partitions of the rebuild"
    )
    spark_jvm_options: str = Field(
        "-Duser.timezone=UTC -XX:+UseParallelGC",
        description="JVM options of the rebuild's driver and, in local mode, its executors (spark.driver.extraJavaOptions and spark.executor.extraJavaOptions; under spark-submit its own options apply). It must keep -Duser.timezone=UTC: times reach JDBC as java.sql.Timestamp, read in the JVM's zone; the parallel collector because a batch job wants throughput, not short pauses",
    )
    spark_log_level: SparkLogLevel = Field(
        "WARN", description="Level of Spark's own log lines during the rebuild (any case)"
    )
    spark_conf: dict[str, str] = Field(
        default_factory=dict,
        description='More Spark configuration of the rebuild, a JSON object (`{"spark.sql.adaptive.enabled": "false"}`), applied after Sagaline\'s own (spark_projections/session.py); a key Sagaline sets from another setting, or one its correctness rests on (ANSI mode, the session time zone), is refused with the reason',
    )
    spark_jars_dir: Path = Field(
        Path(".local/spark/jars"),
        description="Jars of the rebuild (Kafka source, JDBC drivers), fetched once by `deploy/local/spark.sh fetch`; relative to the repository",
    )
    spark_kafka_min_partitions: int = Field(
        16,
        ge=0,
        description="Spark tasks the rebuild splits the topic into at least (0: one per Kafka partition)",
    )
    rebuild_scratch_dir: Path = Field(
        Path(".local/spark/scratch"),
        description="Where the rebuild keeps its intermediate files (Parquet; on PostgreSQL the COPY files of its staging tables), in a directory of each run's own (removed at its end; one a killed run left is removed a day later; relative to the repository; a shared filesystem under a cluster master)",
    )
    rebuild_jdbc_batch_size: int = Field(
        10_000,
        ge=1,
        description="Rows per JDBC batch when the rebuild fills staging tables on SQLite (on PostgreSQL it copies them in with COPY)",
    )
    rebuild_progress_s: float = Field(
        5.0, gt=0, description="How often the rebuild prints a progress line"
    )
    rebuild_pause_before_swap_s: float = Field(
        0.0,
        ge=0,
        description="Pause after the staging tables are full, before the swap; only for kill tests (0 in production)",
    )

    # --- change data capture from the legacy school database (issue 10) --------------
    legacy_database_url: str = Field(
        "postgresql+psycopg://sagaline@127.0.0.1:55432/legacy?passfile=.local/pg/pgpass",
        description="SQLAlchemy URL of the legacy school database (schema `school`, deploy/local/legacy/school.sql) whose changes Debezium captures; used by the tests and demos that write legacy rows, never by the correlator (it reads only the Debezium topics). The default takes the password deploy/local/postgres.sh generated from its libpq password file (relative to the working directory: run from the repository)",
    )
    cdc_window_s: float = Field(
        10.0,
        gt=0,
        description="How long the CDC correlator waits for the other rows of one legacy transaction (student, course, link) when no END record says they are all in (while its END record says rows are still to come it waits window after window, up to SAGALINE_CDC_RETENTION_S); its second stage holds a creation or an enrollment twice as long for the rest of an action spread over several transactions. Longer merges more rows into one event, and delays events by as much: at worst three windows (sagas/definitions/legacy_actions.py)",
    )
    cdc_retention_s: float = Field(
        3600.0,
        gt=0,
        description="How long the CDC correlator keeps an idle transaction's, student's or course's state (the positions and ids it drops redeliveries by) before it resets it; a Debezium redelivery older than this is caught only by the worker's window of message ids. At least a few windows",
    )
    cdc_enabled: bool = Field(
        False,
        description="Run the CDC ingest edge and the correlator in the worker: read Debezium's legacy topics (SAGALINE_CDC_TOPIC_PREFIX), decode and re-key each change for the correlator's processes (legacy-tx, legacy-actions, legacy-domain; off, they do not run and their topics are not read); `make run` turns it on. The topics must exist (Kafka Connect creates them: deploy/local/connect.sh start)",
    )
    cdc_topic_prefix: str = Field(
        "legacy",
        description="Debezium's `topic.prefix`: the worker reads `<prefix>.school.student`, `<prefix>.school.course`, `<prefix>.school.student_course` and `<prefix>.transaction`; set it to read an existing Debezium deployment's topics",
    )
    cdc_topic_partitions: int = Field(
        1,
        ge=1,
        description="Partitions of each of the four Debezium topics; the worker refuses to start on a mismatch (the ingest keeps its read positions in a table partitioned like them)",
    )
    cdc_drives_enrollment: bool = Field(
        False,
        description="A legacy enrollment starts an enrollment saga (after upserting the course's capacity and the student's max credits from their rows) and a legacy drop drops it, so rosters and seat limits see legacy enrollments; needs SAGALINE_CDC_ENABLED; `make run` turns it on",
    )

    @field_validator("spark_log_level", mode="before")
    @classmethod
    def _level_in_any_case(cls, value: object) -> object:
        return value.upper() if isinstance(value, str) else value

    @field_validator("spark_conf", mode="before")
    @classmethod
    def _spark_values_as_text(cls, value: object) -> object:
        """JSON's true, false and numbers as Spark writes them (``"false"``, ``"8"``)."""
        if not isinstance(value, dict):
            return value
        return {key: _spark_text(v) for key, v in value.items()}

    @model_validator(mode="after")
    def _spark_conf_only_adds(self) -> Settings:
        """Refuse at start a Spark setting that would override another setting or what the
        rebuild's results rest on, and JVM options without UTC."""
        if UTC_JVM not in self.spark_jvm_options.split():
            raise ValueError(
                f"SAGALINE_SPARK_JVM_OPTIONS must keep {UTC_JVM}: times reach JDBC as "
                "java.sql.Timestamp, read in the JVM's zone"
            )
        for key in self.spark_conf:
            if not key.startswith("spark."):
                raise ValueError(f"SAGALINE_SPARK_CONF: {key!r} is not a Spark setting")
            if key in SPARK_CONF_GIVEN_BY:
                given_by = f"SAGALINE_{SPARK_CONF_GIVEN_BY[key].upper()}"
                raise ValueError(f"SAGALINE_SPARK_CONF: {key} is set by {given_by}")
            if key in SPARK_CONF_RELIED_ON:
                raise ValueError(
                    f"SAGALINE_SPARK_CONF: {key} stays as Sagaline sets it: "
                    f"{SPARK_CONF_RELIED_ON[key]}"
                )
        return self

    @model_validator(mode="after")
    def _credentials_are_whole(self) -> Settings:
        """Refuse at start what would only fail at the first connection, and say why."""
        if self.kafka_security_protocol.startswith("SASL_"):
            given = (self.kafka_sasl_password is not None) + (
                self.kafka_sasl_password_file is not None
            )
            if not self.kafka_sasl_username or given != 1:
                raise ValueError(
                    f"SAGALINE_KAFKA_SECURITY_PROTOCOL={self.kafka_security_protocol} needs "
                    "SAGALINE_KAFKA_SASL_USERNAME and exactly one of "
                    "SAGALINE_KAFKA_SASL_PASSWORD or SAGALINE_KAFKA_SASL_PASSWORD_FILE"
                )
        if (self.kafka_ssl_certfile is None) != (self.kafka_ssl_keyfile is None):
            raise ValueError(
                "SAGALINE_KAFKA_SSL_CERTFILE and SAGALINE_KAFKA_SSL_KEYFILE go together"
            )
        if self.database_password_file is not None and _password_in(self.database_url):
            raise ValueError(
                "the database password is given twice: in SAGALINE_DATABASE_URL and in "
                "SAGALINE_DATABASE_PASSWORD_FILE; keep one"
            )
        if self.batch_size > self.seen_window:
            # A batch stored in part is replayed: each key must find every message id of it
            # in its seen window (services/worker/runner.py).
            raise ValueError(
                f"SAGALINE_BATCH_SIZE={self.batch_size} is over SAGALINE_SEEN_WINDOW="
                f"{self.seen_window}: a batch must fit in the ids each key remembers"
            )
        if self.cdc_drives_enrollment and not self.cdc_enabled:
            # Without CDC the correlator does not run: nothing would drive the enrollments,
            # and a setting that silently does nothing is worse than a refusal.
            raise ValueError(
                "SAGALINE_CDC_DRIVES_ENROLLMENT needs SAGALINE_CDC_ENABLED=true: the CDC "
                "correlator that sends legacy enrollments on runs only with CDC"
            )
        return self

    def kafka_sasl_secret(self) -> str:
        """The SASL password, from the setting or its file (read now: a rotated secret file
        is picked up by the next client)."""
        if self.kafka_sasl_password_file is not None:
            return _first_line(self.kafka_sasl_password_file, "SAGALINE_KAFKA_SASL_PASSWORD_FILE")
        return (
            "" if self.kafka_sasl_password is None else self.kafka_sasl_password.get_secret_value()
        )

    def database_url_with_password(self) -> str:
        """``database_url``, with the password of ``database_password_file`` put in. Only for
        opening connections: print :func:`masked_url` of it, never the URL itself."""
        if self.database_password_file is None:
            return self.database_url
        password = _first_line(self.database_password_file, "SAGALINE_DATABASE_PASSWORD_FILE")
        url = make_url(self.database_url).set(password=password)
        return url.render_as_string(hide_password=False)

    def topic(self, channel: str) -> str:
        return f"{self.topic_prefix}.{channel}"

    def environment(self) -> dict[str, str | None]:
        """Every setting as the SAGALINE_* variable that gives it back (None: unset), for a
        child process: a secret in clear, a setting of several values as JSON."""
        out: dict[str, str | None] = {}
        for name, value in self.model_dump().items():
            if isinstance(value, SecretStr):
                value = value.get_secret_value()
            elif isinstance(value, dict):
                value = json.dumps(value)
            out[f"SAGALINE_{name.upper()}"] = None if value is None else str(value)
        return out

    @property
    def decline_methods(self) -> frozenset[str]:
        return _methods(self.payment_decline_methods)

    @property
    def silent_methods(self) -> frozenset[str]:
        return _methods(self.payment_silent_methods)


def masked_url(url: str) -> str:
    """A database URL fit to print: the password (if any) shown as ``***``."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except Exception:  # not a URL SQLAlchemy reads: show none of it
        return "<a database URL SQLAlchemy cannot parse>"


def _password_in(url: str) -> bool:
    try:
        return bool(make_url(url).password)
    except Exception:  # the engine will say what is wrong with it
        return False


def _first_line(path: Path, setting: str) -> str:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ValueError(f"{setting}: cannot read {path} ({exc.strerror})") from None
    lines = text.splitlines()
    if not lines or not lines[0]:
        raise ValueError(f"{setting}: the first line of {path} is empty")
    return lines[0]


def _spark_text(value: object) -> object:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value) if isinstance(value, int | float) else value  # others: refused as typed


def _methods(csv: str) -> frozenset[str]:
    return frozenset(m.strip() for m in csv.split(",") if m.strip())


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    return Settings()
