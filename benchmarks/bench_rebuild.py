"""Rebuild throughput: ``sagaline rebuild`` over 1,000,000 events, end to end, beside the
online projector's rate on the same events and a raw aiokafka consume rate.

    python benchmarks/bench_rebuild.py [--events 1000000] [--products 1000]
        [--projector-sample 200000] [--projector-seconds 90]

1. Writes ``--events`` domain events (order sagas over 1,000 products: confirmed,
   rejected, declined, cancelled, expired, in flight; ~9 events per saga) to a fresh
   event topic with a batching aiokafka producer.
2. Baseline: a group-less aiokafka consumer reads the whole topic (no decoding).
3. Rebuild: ``sagaline rebuild`` as a process into a fresh, migrated PostgreSQL database,
   timed from process start to exit (Spark start-up included). The RSS of the process tree
   (Python driver, its JVM, Python workers) is sampled every 0.5 s; the JVM's heap is
   capped by ``spark.driver.memory`` (1g): the topic is never collected to the driver.
4. Projector: the real projector into another fresh database, on the same topic from the
   start, until it has applied ``--projector-sample`` events or ``--projector-seconds``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

if not __package__:  # run as a script (python benchmarks/...): make the repo importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from aiokafka import AIOKafkaProducer
from aiokafka.partitioner import DefaultPartitioner
from sqlalchemy import Engine, create_engine, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import OperationalError

from benchmarks.bench_projector import raw_consume_rate
from benchmarks.common import delete_run_topics, git_rev, machine
from readside.migrate import upgrade
from runtime.kafka_security import aiokafka_options
from runtime.settings import Settings
from runtime.topics import EVENTS, create_topics
from services.projector.runner import Projector
from tests.integration.harness import settings_env
from tests.integration.readside import PG_URL, applied_offsets, read_engine
from tests.spark.history import order_history

EVENTS_PER_ORDER = 9.1
"""Measured mean of tests.spark.history.order_history (half its orders carry the status
event for PENDING that streams written before SagaStatuses.start had); a first guess only,
more orders are made when it falls short."""


async def produce(settings: Settings, events: int, products: int) -> dict[int, int]:
    """``events`` domain events, batched per partition; the end offset per partition."""
    started = time.perf_counter()
    orders = int(events / EVENTS_PER_ORDER) + 1000
    while len(history := order_history(orders, products=products, seed=1)) < events:
        orders = int(orders * 1.2)
    encoded = [(e.key.encode(), e.encode()) for e in history[:events]]
    made = time.perf_counter() - started
    producer = AIOKafkaProducer(**aiokafka_options(settings), acks=1, max_batch_size=1 << 20)
    await producer.start()
    topic, partitions = settings.topic(EVENTS), list(range(settings.partitions))
    started = time.perf_counter()
    try:
        by_partition: dict[int, list[tuple[bytes, bytes]]] = {p: [] for p in partitions}
        for key, value in encoded:  # the partition aiokafka (and the worker) would pick
            by_partition[DefaultPartitioner()(key, partitions, partitions)].append((key, value))
        await asyncio.gather(*[_send(producer, topic, p, rs) for p, rs in by_partition.items()])
    finally:
        await producer.stop()
    sent = time.perf_counter() - started
    print(
        f"produce   {events:,} events generated in {made:.1f} s, written in {sent:.1f} s "
        f"({events / sent:,.0f} events/s, batches of up to 1 MiB per partition)"
    )
    return {p: len(rs) for p, rs in by_partition.items()}


async def _send(
    producer: AIOKafkaProducer, topic: str, partition: int, records: list[tuple[bytes, bytes]]
) -> None:
    batch, pending = producer.create_batch(), []
    for key, value in records:
        if batch.append(key=key, value=value, timestamp=None) is None:
            pending.append(await producer.send_batch(batch, topic, partition=partition))
            batch = producer.create_batch()
            batch.append(key=key, value=value, timestamp=None)
    pending.append(await producer.send_batch(batch, topic, partition=partition))
    await asyncio.gather(*pending)


@dataclass
class TreeRss:
    """Peak resident memory of a process and its descendants, from /proc: the tree is
    walked every ``refresh`` seconds, the known processes' RSS read every ``every``."""

    pid: int
    every: float = 0.5
    refresh: float = 3.0
    peak_total: float = 0.0
    peak_by_kind: dict[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        tree, walked = _tree(self.pid), time.monotonic()
        while not self._stop.wait(self.every):
            if time.monotonic() - walked > self.refresh:
                tree, walked = _tree(self.pid), time.monotonic()
            by_kind: dict[str, float] = {}
            for pid, kind in tree:
                by_kind[kind] = by_kind.get(kind, 0.0) + _rss_mib(pid)
            self.peak_total = max(self.peak_total, sum(by_kind.values()))
            for kind, mib in by_kind.items():
                self.peak_by_kind[kind] = max(self.peak_by_kind.get(kind, 0.0), mib)


def _tree(root: int) -> list[tuple[int, str]]:
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        kind = _kind(pid, root)
        if kind:
            found.append((pid, kind))
        todo.extend(children.get(pid, []))
    return found


def _kind(pid: int, root: int) -> str:
    try:
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""
    if pid == root:
        return "python driver"
    return "jvm" if "java" in cmd.split(" ", 1)[0] else "python workers"


def _rss_mib(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def rebuild(settings: Settings, url: str, events: int, log: Path) -> float:
    """``sagaline rebuild`` as a process, its output printed verbatim; returns seconds."""
    env = settings_env(settings) | {"SAGALINE_DATABASE_URL": url, "SAGALINE_LOG_LEVEL": "WARNING"}
    started = time.perf_counter()
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "sagaline.cli", "rebuild"],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
        rss = TreeRss(proc.pid)
        code = proc.wait()
        rss.stop()
    elapsed = time.perf_counter() - started
    output = [line for line in log.read_text(errors="replace").splitlines() if "=" in line]
    for line in output:
        if line.startswith(("stage=", "summary")):
            print(f"  | {line}")
    assert code == 0, f"rebuild failed ({code}):\n{log.read_text()[-3000:]}"
    peaks = ", ".join(f"{k} {v:,.0f} MiB" for k, v in sorted(rss.peak_by_kind.items()))
    print(
        f"rebuild   {events:,} events in {elapsed:.1f} s end to end (Spark start-up included) "
        f"= {events / elapsed:,.0f} events/s"
    )
    print(f"memory    peak RSS of the process tree {rss.peak_total:,.0f} MiB ({peaks})")
    return elapsed


@contextmanager
def fresh_database() -> Iterator[str]:
    """A new, migrated PostgreSQL database; dropped afterwards, waiting out the autovacuum
    worker that a million fresh rows attract (a non-superuser cannot terminate it)."""
    admin = create_engine(PG_URL, isolation_level="AUTOCOMMIT")
    name = f"bench_{uuid.uuid4().hex[:12]}"
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    url = make_url(PG_URL).set(database=name).render_as_string(hide_password=False)
    try:
        upgrade(url)
        yield url
    finally:
        _drop(admin, name)
        admin.dispose()


def _drop(admin: Engine, name: str) -> None:
    for _ in range(60):
        try:
            with admin.connect() as conn:
                conn.execute(text(f'DROP DATABASE IF EXISTS "{name}"'))
            return
        except OperationalError:
            time.sleep(1)
    print(f"note      could not drop database {name}; drop it by hand")


async def projector_rate(
    settings: Settings, url: str, sample: int, seconds: float
) -> tuple[int, float]:
    """(events applied, seconds) by the real projector from the start of the topic."""
    topic = settings.topic(EVENTS)
    with read_engine(url) as engine:
        stop = asyncio.Event()
        started = time.perf_counter()
        task = asyncio.create_task(Projector(settings, engine).run(stop))
        applied = 0
        while time.perf_counter() - started < seconds and not task.done():
            applied = sum((await asyncio.to_thread(applied_offsets, engine, topic)).values())
            if applied >= sample:
                break
            await asyncio.sleep(0.05)
        elapsed = time.perf_counter() - started
        stop.set()
        await task
    return applied, elapsed


async def main(args: argparse.Namespace) -> None:
    run = uuid.uuid4().hex[:6]
    tmp = Path(f".local/bench-rebuild-{run}")
    tmp.mkdir(parents=True, exist_ok=True)
    settings = Settings(topic_prefix=f"benchrb{run}", app_id=f"benchrb{run}", log_level="WARNING")
    print(f"machine: {machine()}\ncommit: {git_rev()}  partitions: {settings.partitions}")
    print(
        f"postgres  {PG_URL.split('@')[-1]}  spark {settings.spark_master}, "
        f"driver memory {settings.spark_driver_memory}"
    )
    await create_topics(settings)
    try:
        ends = await produce(settings, args.events, args.products)
        total = sum(ends.values())
        raw = await raw_consume_rate(settings, ends, 2000)
        print(f"baseline  raw aiokafka consume of the topic (no decoding): {raw:,.0f} events/s")
        with fresh_database() as url:
            elapsed = rebuild(settings, url, total, tmp / "rebuild.log")
        with fresh_database() as url:
            applied, seconds = await projector_rate(
                settings, url, args.projector_sample, args.projector_seconds
            )
        rate = applied / seconds
        print(
            f"projector {applied:,} events applied in {seconds:.1f} s = {rate:,.0f} events/s "
            f"(first {args.projector_sample:,} events or {args.projector_seconds:.0f} s; "
            f"batch {settings.projector_batch_size}); at that rate {total:,} events take "
            f"{total / rate:,.0f} s"
        )
        print(
            f"result    rebuild {total / elapsed:,.0f} events/s = {total / elapsed / rate:.1f}x "
            f"the online projector; {elapsed:.1f} s for {total:,} events "
            f"(target: under 60 s) {'MET' if elapsed < 60 else 'MISSED'}"
        )
    finally:
        await delete_run_topics(settings)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--products", type=int, default=1000)
    parser.add_argument("--projector-sample", type=int, default=200_000)
    parser.add_argument("--projector-seconds", type=float, default=90.0)
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    asyncio.run(main(parser.parse_args()))
