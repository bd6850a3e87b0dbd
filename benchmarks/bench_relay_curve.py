"""The plain aiokafka relay's CPU per chain against the offered rate: what Kafka's client
alone pays below full load, the floor under the worker's curve (issue 27).

    python -m benchmarks.bench_relay_curve [--rates 40,120,0] [--seconds 30] [--full 20000]

Starts the relay of ``bench_sagas``'s baseline (:mod:`benchmarks.relay`: 9 hops, each hop
a batch taken, sent on and acknowledged, as the worker does, with no state and no decision)
and, for each rate, sends chains paced at that rate for ``--seconds`` (``0``: ``--full``
chains at once, the full-load rate), waits for the last one, and prints the relay's CPU (user
+ system, from /proc, in ms per chain and % of a core) and the ratio of each rate's CPU per
chain to full load's: ``bench_curve``'s ratio for a process that does nothing but Kafka.
"""

from __future__ import annotations

import argparse
import asyncio
import time
import uuid

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

from benchmarks.bench_sagas import HOPS, start_relay
from benchmarks.common import cpu_seconds, git_rev, machine
from runtime.kafka_security import aiokafka_options
from runtime.settings import get_settings


async def step(
    producer: AIOKafkaProducer, done: AIOKafkaConsumer, topic: str, rate: float, n: int, pid: int
) -> tuple[float, float, float]:
    """Chains/s completed, relay CPU ms per chain, relay CPU % of a core."""
    seen = 0
    finished = asyncio.Event()

    async def count() -> None:
        nonlocal seen
        while seen < n:
            batch = await done.getmany(timeout_ms=200)
            seen += sum(len(r) for r in batch.values())
        finished.set()

    counter = asyncio.create_task(count())
    cpu0, t0 = cpu_seconds(pid), time.monotonic()
    for i in range(n):
        if rate:
            await asyncio.sleep(max(0.0, t0 + i / rate - time.monotonic()))
        await producer.send(topic, b"0|" + b"x" * 80, key=str(i).encode())
    await producer.flush()
    await asyncio.wait_for(finished.wait(), timeout=120)
    took = time.monotonic() - t0
    cpu = cpu_seconds(pid) - cpu0
    await counter
    return n / took, 1000 * cpu / n, 100 * cpu / took


async def main(args: argparse.Namespace) -> None:
    settings = get_settings()
    run = uuid.uuid4().hex[:6]
    topic, done_topic = f"relaycurve{run}", f"relaycurve{run}-done"
    relay = await start_relay(settings, topic, done_topic)
    done = AIOKafkaConsumer(done_topic, **aiokafka_options(settings), auto_offset_reset="latest")
    producer = AIOKafkaProducer(**aiokafka_options(settings), acks="all", linger_ms=1)
    await done.start()
    await producer.start()
    print(f"machine: {machine()}\ncommit: {git_rev()}")
    print(f"relay     {HOPS} hops, {settings.partitions} partitions, pid {relay.pid}")
    try:
        await asyncio.sleep(3)  # the relay joins its group
        await step(producer, done, topic, 0, 500, relay.pid)  # warm-up
        rows = []
        for rate in args.rates:
            n = args.full if rate == 0 else int(rate * args.seconds)
            rows.append((rate, *await step(producer, done, topic, rate, n, relay.pid)))
        full = next((ms for rate, _, ms, _ in rows if rate == 0), None)
        for rate, got, ms, share in rows:
            label = "full load" if rate == 0 else f"{rate:g} chains/s"
            ratio = f" = {ms / full:.1f}x full load's" if full else ""
            print(
                f"rate      {label:>16}: {got:,.0f} chains/s, relay CPU {ms:.3f} ms a chain"
                f" ({ms / HOPS * 1000:.0f} us a hop){ratio}, {share:.0f}% of a core"
            )
    finally:
        relay.terminate()
        relay.wait()
        await done.stop()
        await producer.stop()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument(
        "--rates", type=lambda s: [float(x) for x in s.split(",")], default=[40.0, 120.0, 0.0]
    )
    parser.add_argument("--seconds", type=float, default=30)
    parser.add_argument("--full", type=int, default=20000, help="chains sent at once for 0")
    asyncio.run(main(parser.parse_args()))
