"""One cycle's Sagaline: its own topics, database, data dirs and ports; N workers (one by
default; several form one consumer group, each with its own data dir and web port, and one
standby of every table partition), a projector, an API.

Timing settings, and why (see also RELIABILITY.md):

* session timeout 6 s (the minimum the settings allow): a SIGSTOPped or killed worker loses
  its partitions quickly, so a rebalance happens inside every cycle that stops one.
* step timeout 60 s: longer than the worst outage a fault causes (broker down up to 30 s,
  its restart, then a group rebalance after the session timeout), so a saga is not timed
  out by a fault alone -- and a timeout would not be a violation anyway: it compensates and
  ends CANCELLED. Short enough that a saga whose reply was really lost resolves (CANCELLED
  by timeout) inside the drain budget, so only an order whose saga never started or whose
  deadline was lost stays non-final.
* reservation TTL 150 s: longer than the two steps between a reserve and its confirm
  (placement -> authorize -> confirm, each bounded by the step timeout), so a saga never
  loses a hold to the TTL before its own timeout fires; the TTL only backs up a lost cancel.
* retirement after 5 s, markers kept 20 s (sagas/machinery/retirement.py): far shorter than
  production's hour and day, so finished orders, enrollments and payments retire, have their
  redeliveries dropped by markers, and are deleted by tombstones inside each cycle (load 25
  s, drain), with worker kills among those writes. Shorter than the step timeout, which the
  production argument forbids: it holds here because a final order ignores every reply, and
  a payment meets a late Void only after a saga timed out in CAPTURING, which no fault
  lasts long enough to cause (above). The store check reads every recovered record
  (faults/stores.py): a marker is a state, a key deleted is absent from changelog and store.
  A drop or transfer the load sends for an enrollment that ended, delayed past those 25 s
  by a broker kill, finds the key forgotten and is refused as unknown at sequence 1 again:
  the documented limit, which ``checks.forgotten_then_refused`` tells from a conflict.
"""

from __future__ import annotations

import logging
import os
import socket
import subprocess
import sys
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import create_engine, text
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import DBAPIError

from faults.procs import REPO, Service
from runtime.settings import Settings
from services.keys import ensure_local_key

log = logging.getLogger(__name__)


def local_pg_url(database: str = "sagaline") -> str:
    """The cluster deploy/local/postgres.sh runs, as `sagaline`, with the password (and port)
    it generated into .local/pg/pgpass (libpq's format: host:port:database:user:password).
    Before its first start there is no file: the URL then has no password, and the first
    connection is refused with a sentence that names the server."""
    port, password = 55432, None
    try:
        lines = (REPO / ".local" / "pg" / "pgpass").read_text().splitlines()
    except OSError:
        lines = []
    for line in lines:
        fields = line.split(":")  # the generated passwords are hex: no escaped ':' in them
        if len(fields) == 5 and fields[0] == "127.0.0.1" and fields[3] == "sagaline":
            port, password = int(fields[1]), fields[4]
            break
    url = URL.create("postgresql+psycopg", "sagaline", password, "127.0.0.1", port, database)
    return url.render_as_string(hide_password=False)


PG_URL = (
    os.environ.get("SAGALINE_FAULTS_PG_URL")
    or os.environ.get("SAGALINE_TEST_PG_URL")
    or local_pg_url()
)
SESSION_TIMEOUT_S = 6.0
STEP_TIMEOUT_S = 60.0
RESERVATION_TTL_S = 150.0
RETIRE_AFTER_S = 5.0
RETIRED_MARKER_S = 20.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def cycle_settings(
    bootstrap: str,
    run_id: str,
    cycle: int,
    cycle_dir: Path,
    db_url: str,
    standbys: int | None = None,
) -> Settings:
    name = f"f{run_id}c{cycle}"
    values: dict[str, Any] = {
        "kafka_bootstrap": bootstrap,
        "topic_prefix": name,
        "app_id": name,
        "partitions": 4,
        "data_dir": cycle_dir / "worker-data",
        "worker_web_port": free_port(),
        "api_port": free_port(),
        "api_host": "127.0.0.1",
        "session_timeout_s": SESSION_TIMEOUT_S,
        "step_timeout_s": STEP_TIMEOUT_S,
        "reservation_ttl_s": RESERVATION_TTL_S,
        "retire_after_s": RETIRE_AFTER_S,
        "retired_marker_s": RETIRED_MARKER_S,
        "database_url": db_url,
        "metrics_log_s": 10.0,
        "gap_alert_s": 20.0,
        "log_level": "INFO",
        "api_keys_file": cycle_dir / "api-keys",
    }
    if standbys is not None:  # else what production runs by default
        values["table_standby_replicas"] = standbys
    return Settings(**values)


def cycle_api_key(settings: Settings) -> str:
    """The key the cycle's load sends (every scope; the API holds only its hash)."""
    keys_file = settings.api_keys_file
    return ensure_local_key(keys_file.with_name(keys_file.name + ".key"), keys_file)


def settings_env(settings: Settings) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SAGALINE_")}
    env |= {name: value for name, value in settings.environment().items() if value is not None}
    return env


def create_database() -> tuple[str, str]:
    """A new, empty PostgreSQL database on the shared server; (name, URL)."""
    name = f"faults_{uuid.uuid4().hex[:12]}"
    admin = create_engine(PG_URL, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            conn.execute(text(f'CREATE DATABASE "{name}"'))
    finally:
        admin.dispose()
    url = make_url(PG_URL).set(database=name).render_as_string(hide_password=False)
    return name, url


def drop_database(name: str, attempts: int = 5) -> None:
    """Drop a cycle's database. A cleanup never ends a run: when a session of another role
    holds the database (the server's other users: FORCE may not end it), it is tried again
    and then left behind with a warning."""
    admin = create_engine(PG_URL, isolation_level="AUTOCOMMIT")
    try:
        for attempt in range(attempts):
            try:
                with admin.connect() as conn:
                    conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
                return
            except DBAPIError as exc:
                if attempt == attempts - 1:
                    log.warning("database %s left behind: %s", name, str(exc).splitlines()[0])
                    return
                time.sleep(1.0 + attempt)
    finally:
        admin.dispose()


def run_cli(env: dict[str, str], log: Path, *args: str) -> None:
    """A one-shot ``sagaline`` command (topics create, db upgrade); raises if it fails."""
    with open(log, "ab") as out:
        subprocess.run(
            [sys.executable, "-m", "sagaline.cli", *args],
            env=env,
            cwd=REPO,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            check=True,
            timeout=120,
        )


def worker_names(workers: int) -> list[str]:
    """``worker`` alone (its logs ``worker-1.log``, ... as they always were), else
    ``worker1`` ... ``workerN``."""
    return ["worker"] if workers == 1 else [f"worker{i}" for i in range(1, workers + 1)]


@dataclass
class Stack:
    settings: Settings
    workers: tuple[Service, ...]
    projector: Service
    api: Service
    worker_settings: dict[str, Settings]
    """Each worker's settings by its name: its own data dir and web port."""

    @classmethod
    def create(cls, settings: Settings, log_dir: Path, workers: int = 1) -> Stack:
        cycle_api_key(settings)  # before the API starts, so it starts with a key
        env = settings_env(settings)
        run_cli(env, log_dir / "setup.log", "topics", "create")
        run_cli(env, log_dir / "setup.log", "db", "upgrade")
        mine = {
            name: settings
            if workers == 1
            else settings.model_copy(
                update={"data_dir": log_dir / f"{name}-data", "worker_web_port": free_port()}
            )
            for name in worker_names(workers)
        }
        return cls(
            settings,
            tuple(Service("worker", settings_env(s), log_dir, name) for name, s in mine.items()),
            Service("projector", env, log_dir),
            Service("api", env, log_dir),
            mine,
        )

    @property
    def api_url(self) -> str:
        return f"http://127.0.0.1:{self.settings.api_port}"

    @property
    def services(self) -> tuple[Service, ...]:
        return (*self.workers, self.projector, self.api)

    def service(self, name: str) -> Service:
        return next(s for s in self.services if s.name == name)

    def start_worker(self, worker: Service, timeout: float = 120) -> bool:
        worker.start()
        return worker.wait_for_log("Ready", timeout)

    def start_projector(self) -> bool:
        self.projector.start()
        return True

    def start_api(self, timeout: float = 60) -> bool:
        self.api.start()
        return self.api.wait_http(f"{self.api_url}/healthz", timeout)

    def start(self, name: str) -> bool:
        service = self.service(name)
        if service.command == "worker":
            return self.start_worker(service)
        if service.command == "projector":
            return self.start_projector()
        return self.start_api()

    def stop_all(self) -> None:
        """The workers together (each stopping one would rebalance the others in turn),
        then the projector and the API."""
        with ThreadPoolExecutor(len(self.workers)) as pool:
            list(pool.map(Service.terminate, self.workers))
        self.projector.terminate()
        self.api.terminate()
