"""The worker's own CPU per record, without Kafka: the agent body on an in-memory table.

    python -m benchmarks.bench_runner [--records 20000] [--products 200] [--repeat 3]

The ``hot/qtr`` line times each quarter of the hot run apart (from an empty record: the
first quarter is where the history grows, the last where it is longest).

Runs the inventory ledger's agent body (:class:`~services.worker.runner.ProcessRunner`) over
batches of 200 reserve/confirm pairs, with the decoded-state cache off and on, on spread
products and on one hot product whose record carries a long history. Sends complete at once
and the table is a dict, so what is timed is decode, decide, encode and bookkeeping: the part
of the worker this process can change, measured apart from the broker and the shared CPUs'
noise: rates are per CPU-second of this process (still: compare ratios printed in one run;
CPU caches and clock are shared).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time
from datetime import UTC, datetime
from typing import Any

from benchmarks.common import git_rev, machine
from sagas.contracts import ledger as lc
from sagas.messages import Envelope, Message
from sagas.participants.ledger import CapacityLedger
from services.worker.metrics import Metrics
from services.worker.runner import DictTable, Incoming, ProcessRunner

BATCH = 200


async def _acked(topic: str, key: bytes, value: bytes) -> Any:
    future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    future.set_result(None)
    return future


def _incoming(message: Message, key: str, offset: int) -> Incoming:
    env = Envelope.wrap(
        message,
        message_id=f"m{offset}",
        key=key,
        saga_id=f"o{offset}",
        reply_to="order-saga",
        occurred_at=datetime.now(UTC),
    )
    return Incoming("b.inventory", 0, offset, key.encode(), env.encode())


def _records(n: int, products: int) -> list[Incoming]:
    """Capacity for each product, then reserve and confirm pairs spread over the products."""
    out = [(lc.SetCapacity(on_hand=10**9), f"p{i}") for i in range(products)]
    for i in range(n // 2):
        key, rid = f"p{i % products}", f"o{i}:p{i % products}"
        out.append((lc.Reserve(reservation_id=rid, quantity=1, ttl_seconds=600), key))
        out.append((lc.Confirm(reservation_id=rid), key))
    return [_incoming(message, key, offset) for offset, (message, key) in enumerate(out)]


async def _rate(records: list[Incoming], cache_keys: int) -> float:
    return sum(len(q) for q in _split(records)) / sum(await _quarter_times(records, cache_keys))


def _split(records: list[Incoming]) -> list[list[Incoming]]:
    """The batches in four runs of equal length (the last takes the rest)."""
    batches = [records[b : b + BATCH] for b in range(0, len(records), BATCH)]
    size = len(batches) // 4
    cut = [batches[i * size : (i + 1) * size] for i in range(3)] + [batches[3 * size :]]
    return [[r for batch in q for r in batch] for q in cut]


async def _quarter_times(records: list[Incoming], cache_keys: int) -> list[float]:
    """CPU seconds of this process over each quarter of the batches, in order."""
    runner = ProcessRunner(
        process=CapacityLedger(name="inventory", entity_type="product"),
        table=DictTable(),
        send=_acked,
        topic_for=lambda channel: f"b.{channel}",
        dead_letter_topic="b.deadletter",
        metrics=Metrics(),
        state_cache_keys=cache_keys,
    )
    # CPU time of this process, not wall time: time the shared cores spent on other work
    # while this one waited to run is not counted.
    times = []
    for quarter in _split(records):
        start = time.process_time()
        for base in range(0, len(quarter), BATCH):
            await runner.handle_batch(quarter[base : base + BATCH])
        times.append(time.process_time() - start)
    return times


async def main(args: argparse.Namespace) -> None:
    print(f"machine: {machine()}\ncommit: {git_rev()}")
    print(f"load      1-min load average before: {os.getloadavg()[0]:.2f}")
    for label, products in (("spread", args.products), ("hot", 1)):
        records = _records(args.records, products)
        # Interleaved repeats, best of each: other work on the shared cores only slows runs.
        off = on = 0.0
        for _ in range(args.repeat):
            off = max(off, await _rate(records, 0))
            on = max(on, await _rate(records, 10_000))
        print(
            f"{label:<9} {len(records):,} records over {products} product(s), best of "
            f"{args.repeat}: cache off {off:,.0f}, cache on {on:,.0f} records/CPU-s "
            f"= {on / off:.2f}x"
        )
    # One product from an empty record: does a decision cost more as its history grows?
    records = _records(args.records, 1)
    best = [0.0] * 4
    for _ in range(args.repeat):
        times = await _quarter_times(records, 10_000)
        best = [max(b, len(q) / t) for b, q, t in zip(best, _split(records), times, strict=True)]
    print(
        f"hot/qtr   the same, cache on, per quarter of the run (best of {args.repeat}): "
        + ", ".join(f"{r:,.0f}" for r in best)
        + f" records/CPU-s; last/first {best[-1] / best[0]:.2f}"
    )
    print(f"load      1-min load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--records", type=int, default=20_000)
    parser.add_argument("--products", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=3)
    asyncio.run(main(parser.parse_args()))
