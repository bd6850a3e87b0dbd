"""Order sagas placed through the REST API by `wrk`, beside the same orders sent straight to
Kafka, on one worker in the same run.

    python -m benchmarks.bench_rest_e2e [--orders 3000] [--rounds 3]

The full stack: a worker (RocksDB tables) and one API process (no projector: outcomes are
read from the domain-event topic, where the worker writes them). First the direct rate:
``--orders`` single-line orders sent to the saga topic with the command bus, as
`bench_sagas` sends them; sagas/s from the first send to the last final status. Then the
REST rate: `wrk` (32 connections, 2 threads, each thread stopping after its share) POSTs the
same number of orders — unique Idempotency-Keys, the same 200 products and 1,000
customers — and sagas/s is counted the same way, over every order whose final status
appears on the event topic after wrk started. The ratio is printed (target: >= 0.8).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import uuid
from pathlib import Path

import sagas.domains  # noqa: F401  (registers every domain's contracts)
from benchmarks.apirun import ApiProcess, ensure_wrk, lscpu_model, run_wrk
from benchmarks.bench_sagas import envelope, run_orders
from benchmarks.common import (
    RssSampler,
    delete_run_topics,
    driver_collector_paused,
    git_rev,
    machine,
)
from runtime.settings import Settings
from runtime.topics import INVENTORY, create_topics
from sagas.contracts.ledger import SetCapacity
from services.bus import CommandBus
from services.event_tail import EventTail
from services.keys import ensure_local_key
from tests.integration.harness import Worker, free_port

API_PORT = 19554
CONNECTIONS, THREADS = 32, 2


def load() -> str:
    return f"{os.getloadavg()[0]:.2f}"


async def rest_orders(
    api: ApiProcess, key: str, tail: EventTail, n: int, products: int
) -> tuple[float, int, str]:
    """``n`` orders POSTed by wrk; sagas/s to their final statuses, how many, wrk's line."""
    loop = asyncio.get_running_loop()
    before = set(tail.outcomes)
    start = loop.time()
    result = await asyncio.to_thread(
        run_wrk,
        api.url,
        "post",
        key=key,
        prefix=f"e2e-{uuid.uuid4().hex[:8]}",
        seconds=600,  # each thread stops after its share; this is only a bound
        connections=CONNECTIONS,
        threads=THREADS,
        api_pid=api.pid,
        stop_after_per_thread=-(-n // THREADS),
        products=products,
    )
    if result.non2xx or result.errors:
        raise SystemExit(f"wrk saw {result.non2xx} non-2xx answers, {result.errors} errors")
    deadline = loop.time() + 600
    while len(tail.outcomes.keys() - before) < result.ok and loop.time() < deadline:
        await asyncio.sleep(0.2)
    await asyncio.sleep(2)  # requests in flight when wrk stopped may have been accepted too
    new = [o for saga_id, o in tail.outcomes.items() if saga_id not in before]
    if len(new) < result.ok:
        raise SystemExit(f"only {len(new)} of {result.ok} accepted orders ended")
    not_confirmed = sum(o.status != "CONFIRMED" for o in new)
    if not_confirmed:
        print(f"  note: {not_confirmed} REST sagas did not confirm")
    rate = len(new) / (max(o.at for o in new) - start)
    return rate, len(new), result.line()


async def main(args: argparse.Namespace) -> None:
    ensure_wrk()
    run = uuid.uuid4().hex[:6]
    root = (Path(".local") / f"bench-e2e-{run}").resolve()
    root.mkdir(parents=True)
    settings = Settings(
        topic_prefix=f"benche2e{run}",
        app_id=f"benche2e{run}",
        data_dir=root / "worker-data",
        worker_web_port=free_port(),
        api_keys_file=root / "api-keys",
        database_url=f"sqlite:///{root}/read.db",
        api_port=API_PORT,
        api_rate_per_s=0,  # no throttling: every POST is an order
        log_level="WARNING",
        step_timeout_s=120,
        reservation_ttl_s=600,
    )
    key = ensure_local_key(root / "api-keys.key", settings.api_keys_file)
    print(f"machine: {machine()}\nlscpu: {lscpu_model()}")
    print(
        f"commit: {git_rev()}  partitions: {settings.partitions}  store: {settings.store}  "
        f"orders per measurement: {args.orders}, {args.products} products"
    )
    print(f"load      1-min load average before: {load()}")
    await create_topics(settings)
    worker = Worker(settings.model_copy(update={"log_level": "INFO"}), root)
    worker.start()
    assert worker.proc is not None
    rss = RssSampler(worker.proc.pid)
    bus, tail = CommandBus(settings), EventTail(settings)
    api = ApiProcess(settings, root / "api.log")
    await bus.start()
    await tail.start()
    direct: list[float] = []
    rest: list[float] = []
    try:
        await bus.send_many(
            [
                (INVENTORY, envelope(SetCapacity(on_hand=10**9), f"p{i}"))
                for i in range(args.products)
            ]
        )
        await run_orders(bus, tail, 300, args.products, None)  # warm-up
        api.start()
        for round_ in range(args.rounds):
            # Odd rounds go direct first, even rounds REST first: a drift in the machine's
            # load over the run does not always favour the same side.
            for side in ("direct", "rest") if round_ % 2 == 0 else ("rest", "direct"):
                if side == "direct":
                    rate, _ = await run_orders(bus, tail, args.orders, args.products, None)
                    direct.append(rate)
                    print(
                        f"  round {round_ + 1} direct to Kafka: {rate:,.0f} sagas/s  load {load()}"
                    )
                    continue
                with driver_collector_paused():  # as run_orders does for the direct side
                    rate, n, line = await rest_orders(api, key, tail, args.orders, args.products)
                rest.append(rate)
                print(
                    f"  round {round_ + 1} REST via wrk:    {rate:,.0f} sagas/s ({n} orders)  "
                    f"load {load()}\n    wrk: {line}"
                )
        d, r = statistics.median(direct), statistics.median(rest)
        print(
            f"baseline  direct to Kafka (command bus, batches of 200): {d:,.0f} sagas/s "
            f"(median of {len(direct)})"
        )
        print(
            f"rest      POST /orders by wrk ({CONNECTIONS} connections): {r:,.0f} sagas/s "
            f"(median of {len(rest)})"
        )
        print(
            f"result    REST end to end = {r / d:.2f}x the direct rate (target >= 0.8x): "
            f"{'MET' if r >= 0.8 * d else 'not met'}"
        )
        print(f"memory    worker {rss.stop()}")
        print(f"load      1-min load average after: {load()}")
    finally:
        api.stop()
        await tail.stop()
        await bus.stop()
        worker.stop()
        await delete_run_topics(settings)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--orders", type=int, default=3000)
    parser.add_argument("--products", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    asyncio.run(main(parser.parse_args()))
