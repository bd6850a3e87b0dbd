"""Projector throughput into PostgreSQL, beside the raw aiokafka consume rate of the same topic.

    python benchmarks/bench_projector.py [--orders 8000] [--batch-size 2000] [--sqlite]
                                         [--processes 1,2,3]

Writes golden order sagas (about 4 domain events per order: order, product and payment
streams, per-entity sequences, ``cmd-`` causations) to a fresh event topic, then, in one
run: reads the whole topic with a bare aiokafka consumer (no decoding), and projects it
with the real projector into a fresh, migrated PostgreSQL database (and optionally SQLite),
timing from the projector's start until its stored offsets reach the end of the topic.

``--processes 1,2,3``: then, for each count, that many ``sagaline projector`` processes in
one consumer group (issue 31) project the same topic into a fresh PostgreSQL database each;
printed per count: the steady rate (the events applied from the moment the group has split
every partition among all its processes to the end, over that time), the rate from their
launch to the end (process starts and group joins included), and the split.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
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
from runtime.topics import EVENTS, create_topics, topic_partitions
from services.projector.runner import Projector
from tests.integration.golden import golden_events
from tests.integration.readside import (
    PG_URL,
    ProjectorProcess,
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


async def processes_rate(
    settings: Settings, count: int, ends: dict[int, int], tmp: Path, run: int
) -> tuple[float, float, list[list[int]]]:
    """(steady events/s, launch-to-end events/s, each process's partitions) of ``count``
    projector processes in one group, into a fresh PostgreSQL database."""
    topic, total = settings.topic(EVENTS), sum(ends.values())
    with fresh_database("postgresql", tmp) as url, read_engine(url) as engine:
        values = {
            "database_url": url,
            "app_id": f"{settings.app_id}-r{run}x{count}",  # a group of its own per run
            "projector_metrics_port": 0,
            "log_level": "INFO",  # the assignment lines
        }
        group = settings.model_copy(update=values)
        processes = []
        for n in range(count):
            log_dir = tmp / f"r{run}x{count}-{n}"
            log_dir.mkdir(exist_ok=True)
            processes.append(ProjectorProcess(group, log_dir))
        formed: tuple[float, int] | None = None  # (when, applied) the group split everything
        start = time.perf_counter()
        try:
            for process in processes:
                process.start()
            while True:
                applied = sum((await asyncio.to_thread(applied_offsets, engine, topic)).values())
                now = time.perf_counter() - start
                shares = [_owned(p) for p in processes]
                if formed is None and _split(shares, settings.partitions):
                    formed = (now, applied)
                if applied >= total:
                    break
                if not all(p.alive() for p in processes):
                    raise RuntimeError("a projector exited:\n" + processes[0].tail_log())
                await asyncio.sleep(0.02)
        finally:
            for process in processes:
                process.stop()
        if formed is None or formed[0] >= now:
            raise RuntimeError(
                "the group had not split the partitions before the end: more --orders"
            )
        steady = (total - formed[1]) / (now - formed[0])
        return steady, total / now, [sorted(s) for s in shares]


def _owned(process: ProjectorProcess) -> set[int]:
    """The partitions the process applies now, from its log."""
    owned: set[int] = set()
    for line in process.log.read_text(errors="replace").splitlines():
        if found := re.search(r"(projecting|released) partitions \[([\d, ]*)\]", line):
            partitions = {int(p) for p in found.group(2).split(",") if p.strip()}
            owned = owned | partitions if found.group(1) == "projecting" else owned - partitions
    return owned


def _split(shares: list[set[int]], partitions: int) -> bool:
    """Every partition owned by exactly one process, and every process owning some."""
    owned = [p for share in shares for p in share]
    busy = sum(1 for share in shares if share)
    return sorted(owned) == list(range(partitions)) and busy == min(len(shares), partitions)


async def main(args: argparse.Namespace) -> None:
    run = uuid.uuid4().hex[:6]
    tmp = Path(f".local/bench-projector-{run}")
    tmp.mkdir(parents=True, exist_ok=True)
    settings = Settings(
        topic_prefix=f"benchproj{run}",
        app_id=f"benchproj{run}",
        projector_batch_size=args.batch_size,
        log_level="WARNING",
        read_retention_s=0.0,  # the history is dated 2024: keep it all, as before
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
        for run, count in enumerate(args.processes):
            steady, launch, shares = await processes_rate(settings, count, ends, tmp, run)
            print(
                f"processes {count} x `sagaline projector` (postgresql, batch {args.batch_size}): "
                f"{steady:,.0f} events/s once the group split the partitions, {launch:,.0f} "
                f"events/s from launch to end; partitions per process {shares}"
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
    parser.add_argument(
        "--processes",
        type=lambda text: [int(n) for n in text.split(",") if n],
        default=[],
        help="also time this many projector processes in one group, e.g. 1,2,3 (or 1,2,3,1,2,3: "
        "alternating runs, when other work shares the CPUs)",
    )
    asyncio.run(main(parser.parse_args()))
