"""Every setting of Sagaline, read from ``SAGALINE_*`` environment variables (or ``.env``).

Entrypoints call :func:`get_settings`; nothing reads the environment at import time.
The README's settings table documents each field below.
"""

from __future__ import annotations

from decimal import Decimal
from functools import lru_cache
from pathlib import Path
from typing import Literal

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


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

    app_id: str = Field(
        "sagaline", description="Faust application id: consumer group and changelog topic prefix"
    )
    store: Literal["rocksdb", "memory"] = Field(
        "rocksdb", description="Faust table store; `memory` keeps state in the heap (tests only)"
    )
    data_dir: Path = Field(
        Path(".local/worker-data"), description="Where the worker keeps its RocksDB tables"
    )
    worker_web_port: int = Field(
        6066, description="Port of the worker's Faust web server (metrics at /sagaline/metrics)"
    )
    batch_size: int = Field(
        200, ge=1, description="Records an agent decides before it sends and stores them together"
    )
    batch_within_ms: int = Field(5, ge=1, description="Longest wait to fill an agent batch")
    deadline_poll_ms: int = Field(
        200, ge=10, description="How often the worker checks for due deadlines"
    )
    seen_window: int = Field(
        500, ge=10, description="Processed message ids remembered per key, for dedupe"
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

    api_host: str = Field("127.0.0.1", description="Address the REST API listens on")
    api_port: int = Field(8000, description="Port of the REST API")
    database_url: str = Field(
        "sqlite:///.local/sagaline.db", description="SQLAlchemy URL of the read-model database"
    )
    log_level: str = Field("INFO", description="Log level of every component")

    def topic(self, channel: str) -> str:
        return f"{self.topic_prefix}.{channel}"

    @property
    def decline_methods(self) -> frozenset[str]:
        return _methods(self.payment_decline_methods)

    @property
    def silent_methods(self) -> frozenset[str]:
        return _methods(self.payment_silent_methods)


def _methods(csv: str) -> frozenset[str]:
    return frozenset(m.strip() for m in csv.split(",") if m.strip())


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    return Settings()
