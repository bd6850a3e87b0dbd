"""The worker's own CPU per record, without Kafka: the agent body on an in-memory table.

    python -m benchmarks.bench_runner [--records 20000] [--products 200]

Runs the inventory ledger's agent body (:class:`~services.worker.runner.ProcessRunner`) over
batches of 200 reserve/confirm pairs, with the decoded-state cache off and on, on spread
products and on one hot product whose record carries a long history. Sends complete at once
and the table is a dict, so what is timed is decode, decide, encode and bookkeeping: the part
of the worker this process can change, measured apart from the broker and the shared CPUs'
noise (still: compare the ratios printed in one run).
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
    runner = ProcessRunner(
        process=CapacityLedger(name="inventory", entity_type="product"),
        table=DictTable(),
        send=_acked,
        topic_for=lambda channel: f"b.{channel}",
        dead_letter_topic="b.deadletter",
        metrics=Metrics(),
        state_cache_keys=cache_keys,
    )
    start = time.perf_counter()
    for base in range(0, len(records), BATCH):
        await runner.handle_batch(records[base : base + BATCH])
    return len(records) / (time.perf_counter() - start)


async def main(args: argparse.Namespace) -> None:
    print(f"machine: {machine()}\ncommit: {git_rev()}")
    print(f"load      1-min load average before: {os.getloadavg()[0]:.2f}")
    for label, products in (("spread", args.products), ("hot", 1)):
        records = _records(args.records, products)
        off = await _rate(records, 0)
        on = await _rate(records, 10_000)
        print(
            f"{label:<9} {len(records):,} records over {products} product(s): cache off "
            f"{off:,.0f} records/s, cache on {on:,.0f} records/s = {on / off:.2f}x"
        )
    print(f"load      1-min load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--records", type=int, default=20_000)
    parser.add_argument("--products", type=int, default=200)
    asyncio.run(main(parser.parse_args()))
