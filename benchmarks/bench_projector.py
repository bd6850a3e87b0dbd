"""Projector throughput into PostgreSQL, beside the raw aiokafka consume rate of the same topic.

    python benchmarks/bench_projector.py [--orders 8000] [--batch-size 2000] [--sqlite]

Writes golden order sagas (about 4 domain events per order: order, product and payment
streams, per-entity sequences, ``cmd-`` causations) to a fresh event topic, then, in one
run: reads the whole topic with a bare aiokafka consumer (no decoding), and projects it
with the real projector into a fresh, migrated PostgreSQL database (and optionally SQLite),
timing from the projector's start until its stored offsets reach the end of the topic.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import sys
import time
import uuid
from pathlib import Path

if not __package__:  # run as a script (python benchmarks/...): make the repo importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from aiokafka import AIOKafkaConsumer

from benchmarks.common import delete_run_topics, git_rev, machine
from readside.queries import counters
from runtime.kafka_security import aiokafka_options
from runtime.settings import Settings
from runtime.topics import EVENTS, create_topics
from services.projector.offsets import topic_partitions
from services.projector.runner import Projector
from tests.integration.golden import golden_events
from tests.integration.readside import (
    PG_URL,
    applied_offsets,
    fresh_database,
    produce,
    read_engine,
)


async def raw_consume_rate(settings: Settings, ends: dict[int, int], batch: int) -> float:
    """Records/s of a group-less aiokafka consumer reading the topic from the start."""
    consumer = AIOKafkaConsumer(**aiokafka_options(settings), enable_auto_commit=False)
    await consumer.start()
    try:
        partitions = await topic_partitions(consumer, settings.topic(EVENTS))
        consumer.assign(partitions)
        await consumer.seek_to_beginning(*partitions)
        total, seen = sum(ends.values()), 0
        start = time.perf_counter()
        while seen < total:
            records = await consumer.getmany(timeout_ms=500, max_records=batch)
            seen += sum(len(r) for r in records.values())
        return total / (time.perf_counter() - start)
    finally:
        await consumer.stop()


async def projector_rate(
    settings: Settings, backend: str, ends: dict[int, int], tmp: Path
) -> tuple[float, dict[str, int]]:
    """Events/s the projector applies into a fresh database of ``backend``."""
    topic, total = settings.topic(EVENTS), sum(ends.values())
    with fresh_database(backend, tmp) as url, read_engine(url) as engine:
        stop = asyncio.Event()
        start = time.perf_counter()
        task = asyncio.create_task(Projector(settings, engine).run(stop))
        while True:
            applied = await asyncio.to_thread(applied_offsets, engine, topic)
            if sum(applied.values()) >= total or task.done():
                break
            await asyncio.sleep(0.02)
        elapsed = time.perf_counter() - start
        stop.set()
        await task
        with engine.connect() as conn:
            return total / elapsed, counters(conn)


async def main(args: argparse.Namespace) -> None:
    run = uuid.uuid4().hex[:6]
    tmp = Path(f".local/bench-projector-{run}")
    tmp.mkdir(parents=True, exist_ok=True)
    settings = Settings(
        topic_prefix=f"benchproj{run}",
        app_id=f"benchproj{run}",
        projector_batch_size=args.batch_size,
        log_level="WARNING",
    )
    print(f"machine: {machine()}\ncommit: {git_rev()}  partitions: {settings.partitions}")
    print(
        f"load      1-min load average before: {os.getloadavg()[0]:.2f} (other work shares the CPUs)"
    )
    await create_topics(settings)
    try:
        events = golden_events(orders=args.orders, products=args.products, customers=1000)
        ends = await produce(settings, events)
        print(
            f"topic     {settings.topic(EVENTS)}: {sum(ends.values()):,} domain events "
            f"({args.orders:,} order sagas over {args.products} products)"
        )
        raw = await raw_consume_rate(settings, ends, args.batch_size)
        print(f"baseline  raw aiokafka consume (no decoding): {raw:,.0f} events/s")
        backends = ["postgresql", "sqlite"] if args.sqlite else ["postgresql"]
        for backend in backends:
            rate, totals = await projector_rate(settings, backend, ends, tmp)
            target = " (target 5,000)" if backend == "postgresql" else ""
            print(
                f"projector {backend:10} batch {args.batch_size}: {rate:,.0f} events/s applied"
                f"{target} = {rate / raw:.2f}x the raw consume rate; {totals}"
            )
        print(f"postgres  {PG_URL.split('@')[-1]}")
        print(f"load      1-min load average after: {os.getloadavg()[0]:.2f}")
    finally:
        await delete_run_topics(settings)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--orders", type=int, default=8000)
    parser.add_argument("--products", type=int, default=500)
    parser.add_argument("--batch-size", type=int, default=2000)
    parser.add_argument("--sqlite", action="store_true", help="also project into SQLite")
    asyncio.run(main(parser.parse_args()))
