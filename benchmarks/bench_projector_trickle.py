"""The projector's CPU below full load, by linger (SAGALINE_PROJECTOR_LINGER_MS).

    python -m benchmarks.bench_projector_trickle [--rate 800] [--seconds 30]
        [--lingers 0,50,0,50]

Writes golden order sagas' events to a fresh event topic at ``--rate`` events/s (what 90
orders/s make: about nine events an order) while a ``sagaline projector`` process projects
them into a fresh PostgreSQL database; one process per ``--lingers`` value, one after
another on the same kind of trickle (alternate the values: this box's speed drifts). Prints
per run the projector's CPU (from /proc, over the trickle), its CPU per 1,000 events, its
database transactions (``sagaline_projector_batches_total``) and events per transaction,
and how far behind the writes it was at the end of each second (the median and the worst
of the applied offsets' lag, in events).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
from pathlib import Path

import httpx
from aiokafka import AIOKafkaProducer
from aiokafka.structs import RecordMetadata
from sqlalchemy import Engine

from benchmarks.common import (
    calibration,
    cpu_seconds,
    delete_run_topics,
    git_rev,
    machine,
    run_settings,
)
from runtime.kafka_security import aiokafka_options
from runtime.settings import Settings
from runtime.topics import EVENTS, create_topics
from sagas.messages import Envelope
from tests.integration.golden import golden_events
from tests.integration.harness import free_port
from tests.integration.readside import (
    ProjectorProcess,
    applied_offsets,
    fresh_database,
    read_engine,
    wait_until_applied,
)


async def one_run(linger_ms: int, rate: float, seconds: float) -> str:
    """One projector process at ``linger_ms`` on a topic of its own."""
    tmp, settings = run_settings("trickle", partitions=8)
    await create_topics(settings)
    try:
        return await _measured(settings, linger_ms, rate, seconds, tmp)
    finally:
        await delete_run_topics(settings)


async def _measured(
    settings: Settings, linger_ms: int, rate: float, seconds: float, tmp: Path
) -> str:
    orders = int(rate * seconds / 6) + 1  # enough: a golden saga makes about eight events
    events = golden_events(orders=orders, products=200)[: int(rate * seconds)]
    topic = settings.topic(EVENTS)
    port = free_port()
    with fresh_database("postgresql", tmp) as url, read_engine(url) as engine:
        values = {
            "database_url": url,
            "app_id": f"{settings.app_id}-projector",
            "projector_linger_ms": linger_ms,
            "projector_metrics_port": port,
        }
        log_dir = tmp / f"linger{linger_ms}"
        log_dir.mkdir(parents=True)
        projector = ProjectorProcess(settings.model_copy(update=values), log_dir)
        producer = AIOKafkaProducer(**aiokafka_options(settings), acks="all")
        await producer.start()
        projector.start()
        try:
            await asyncio.sleep(5)  # joined its group, sought its partitions
            assert projector.proc is not None
            pid = projector.proc.pid
            before_cpu, before_batches = cpu_seconds(pid), await batches(port)
            ends, lags = await trickle(producer, topic, events, rate, engine)
            await wait_until_applied(engine, topic, ends, timeout=300)
            cpu = cpu_seconds(pid) - before_cpu
            transactions = await batches(port) - before_batches
        finally:
            await producer.stop()
            projector.stop()
    n = len(events)
    return (
        f"linger {linger_ms:>4} ms: {n} events at {rate:.0f}/s, projector CPU {cpu:.2f} s "
        f"= {100 * cpu / seconds:.0f}% of a core, {1e6 * cpu / n:.0f} ms per 1,000 events; "
        f"{transactions:.0f} transactions ({n / max(transactions, 1):.1f} events each); "
        f"behind the writes each second: median {statistics.median(lags):.0f}, "
        f"worst {max(lags):.0f} events"
    )


async def trickle(
    producer: AIOKafkaProducer, topic: str, events: list[Envelope], rate: float, engine: Engine
) -> tuple[dict[int, int], list[float]]:
    """Write ``events`` at ``rate``/s, two at a time (a worker's outcomes arrive a few at a
    time, not in bursts); returns the end offsets and, each second, how many events sent
    the database did not hold yet."""
    loop = asyncio.get_running_loop()
    start, sent = loop.time(), 0
    futures: list[asyncio.Future[RecordMetadata]] = []
    lags: list[float] = []
    next_probe = start + 1
    while sent < len(events):
        for e in events[sent : sent + 2]:
            futures.append(await producer.send(topic, e.encode(), key=e.key.encode()))
        sent = len(futures)
        if loop.time() >= next_probe:
            applied = await asyncio.to_thread(applied_offsets, engine, topic)
            lags.append(sent - sum(applied.values()))
            next_probe += 1
        await asyncio.sleep(max(0.0, start + sent / rate - loop.time()))
    ends: dict[int, int] = {}
    for meta in await asyncio.gather(*futures):
        ends[meta.partition] = max(ends.get(meta.partition, 0), meta.offset + 1)
    return ends, lags


async def batches(port: int) -> float:
    async with httpx.AsyncClient(timeout=5) as http:
        text = (await http.get(f"http://127.0.0.1:{port}/metrics")).text
    for line in text.splitlines():
        if line.startswith("sagaline_projector_batches_total "):
            return float(line.split()[1])
    raise RuntimeError("the projector reports no sagaline_projector_batches_total")


async def main(args: argparse.Namespace) -> None:
    print(machine())
    print(f"commit: {git_rev()}  partitions: 8  into PostgreSQL")
    for linger in (int(x) for x in args.lingers.split(",")):
        print(await one_run(linger, args.rate, args.seconds), flush=True)
    print(f"calibration at the end: {calibration()}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rate", type=float, default=800)
    parser.add_argument("--seconds", type=float, default=30)
    parser.add_argument("--lingers", default="0,50,0,50")
    asyncio.run(main(parser.parse_args()))
