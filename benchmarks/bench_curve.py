"""Latency and worker CPU against the offered rate, for one worker configuration.

    python -m benchmarks.bench_curve [--rates 10,40,80,0] [--seconds 15] [--full-orders 3000]
        [--workers 1] [--timeline 5] [SAGALINE_SETTING=value ...]

Starts one worker with the given settings (e.g. ``producer_linger_ms=2``,
``batch_within_ms=1``, ``partitions=4``; names as in runtime/settings.py, without the
prefix), warms it up with 500 orders, then for each rate sends single-line orders over 200
products paced at that rate for ``--seconds`` (``0``: ``--full-orders`` all at once, the
full-load rate) and prints: the sagas/s completed, command-to-outcome p50/p95/p99, and the
CPU the worker, this driver and the broker used over that step (from /proc, in % of one
core), and per saga process its batches (count x records each), the share of the step's
wall time its agent spent deciding, waiting for its outputs' acknowledgements (publish)
and for its states' (store), and how long its records were in transit (from their
producer's send to the batch that took them), from the worker's own counters. With
``--timeline N`` it also prints, per N seconds of each step (by send time), p50, p99, the
worker's CPU and each process's store share, read once a second: whether a held rate's
latency grows as the run goes on. What it is
for: choosing a setting by measurement (a lever's effect on latency at a given rate and on
the worker's CPU), and seeing where the worker's one core saturates. Run
it once per configuration, one after another, on a quiet machine: the rows of two runs
minutes apart are the comparison (there is no baseline inside one run).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time
from collections import Counter
from pathlib import Path

from benchmarks.bench_sagas import envelope, run_orders
from benchmarks.common import (
    StallWatch,
    c_extensions,
    cpu_seconds,
    git_rev,
    machine,
    run_settings,
    summary_ms,
    worker_bus_tail,
    worker_counters,
)
from runtime.topics import INVENTORY, create_topics
from sagas.contracts.ledger import SetCapacity

PRODUCTS = 200


STAGES = ("decide", "publish", "store")
"""A batch's stages, as the worker times them: deciding its records (CPU), waiting for its
outputs' acknowledgements, then for its states' (changelog) acknowledgements."""


def stages(before: Counter[str], after: Counter[str], took: float) -> str:
    """Per process: batches, records per batch, and the share of the step's wall time its
    agent spent in each stage (the rest it waited for input or for the event loop); then
    the share the worker spent in Python's garbage collector (summed over workers)."""
    parts = []
    for process in sorted({k.split(".", 1)[0] for k in after if k.endswith(".batches")}):
        batches = after[f"{process}.batches"] - before[f"{process}.batches"]
        if batches <= 0:
            continue
        records = after[f"{process}.records"] - before[f"{process}.records"]
        timed = after[f"{process}.transit_records"] - before[f"{process}.transit_records"]
        transit = after[f"{process}.transit_s"] - before[f"{process}.transit_s"]
        shares = " ".join(
            f"{stage} {100 * (after[f'{process}.{stage}_s'] - before[f'{process}.{stage}_s']) / took:.0f}%"
            for stage in STAGES
        )
        hop = f", in transit {1000 * transit / timed:.1f} ms/record" if timed else ""
        parts.append(f"{process} {batches:.0f}x{records / batches:.1f} ({shares}{hop})")
    collecting = after["gc.seconds"] - before["gc.seconds"]
    parts.append(f"garbage collector {100 * collecting / took:.0f}%")
    return "; ".join(parts)


Sample = tuple[float, float, Counter[str]]
"""(driver loop time, the workers' CPU seconds, their counters), read once a second."""


async def sample_workers(worker_pids: list[int], ports: list[int], into: list[Sample]) -> None:
    """Read the workers' CPU and counters every second until cancelled (the HTTP read runs
    in a thread, so the driver's loop does not wait for it)."""
    loop = asyncio.get_running_loop()
    while True:
        counters = await asyncio.to_thread(worker_counters, ports)
        into.append((loop.time(), sum(cpu_seconds(pid) for pid in worker_pids), counters))
        await asyncio.sleep(1.0)


def timeline(
    sent: list[float], latencies: list[float], samples: list[Sample], every: float
) -> list[str]:
    """Per ``every`` seconds of the step, by send time: the orders' p50 and p99, and from
    the samples nearest that window's ends the workers' CPU, the time they spent in Python's
    garbage collector, and each process's share of wall time waiting for its states to be
    stored (the stage that grew with a hot key's record). What a whole-run p99 hides: whether it grows as the run goes on."""
    if not sent or len(samples) < 2:
        return []
    start = min(sent)
    windows: dict[int, list[float]] = {}
    for at, latency in zip(sent, latencies, strict=True):
        windows.setdefault(int((at - start) // every), []).append(latency)

    def nearest(t: float) -> Sample:
        return min(samples, key=lambda sample: abs(sample[0] - t))

    rows = []
    processes = sorted({k.split(".", 1)[0] for k in samples[-1][2] if k.endswith(".store_s")})
    for index in sorted(windows):
        ordered = sorted(windows[index])
        first, last = nearest(start + index * every), nearest(start + (index + 1) * every)
        span = last[0] - first[0]
        if span <= 0:
            continue
        store = " ".join(
            f"{p} {100 * (last[2][f'{p}.store_s'] - first[2][f'{p}.store_s']) / span:.0f}%"
            for p in processes
        )
        rows.append(
            f"  {index * every:4.0f}-{(index + 1) * every:<4.0f}s  "
            f"p50 {1000 * ordered[len(ordered) // 2]:5.1f} ms  "
            f"p99 {1000 * ordered[int(0.99 * (len(ordered) - 1))]:5.1f} ms  "
            f"worker cpu {100 * (last[1] - first[1]) / span:3.0f}%  "
            f"in its collector {1000 * (last[2]['gc.seconds'] - first[2]['gc.seconds']):4.0f} ms  "
            f"store {store}"
        )
    return rows


def broker_pids(kafka_home: Path) -> list[int]:
    """The Kafka broker(s) whose command line names this checkout's server.properties."""
    marker = str(kafka_home / "server.properties")
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().decode(errors="replace")
        except OSError:
            continue
        if "kafka.Kafka" in cmdline and marker in cmdline:
            found.append(int(proc.name))
    return found


async def main(args: argparse.Namespace) -> None:
    overrides = dict(item.split("=", 1) for item in args.settings)
    data, settings = run_settings(
        "benchcurve", step_timeout_s=120, reservation_ttl_s=600, **overrides
    )
    print(
        f"machine: {machine()}\ncommit: {git_rev()}  settings: {overrides or 'defaults'}"
        f"  worker processes: {args.workers}"
    )
    print(f"ext       {c_extensions()}")
    print(f"load      1-min load average before: {os.getloadavg()[0]:.2f}")
    await create_topics(settings)
    async with worker_bus_tail(settings, data, args.workers) as (workers, bus, tail):
        worker_pids = [w.proc.pid for w in workers if w.proc is not None]
        ports = [w.settings.worker_web_port for w in workers]
        pids = {"driver": os.getpid()}
        brokers = broker_pids(Path(os.environ.get("SAGALINE_KAFKA_HOME", ".local/kafka")).resolve())
        await bus.send_many(
            [(INVENTORY, envelope(SetCapacity(on_hand=10**9), f"p{i}")) for i in range(PRODUCTS)]
        )
        await run_orders(bus, tail, 500, PRODUCTS, None)  # warm-up
        watch = StallWatch()
        watch.start()
        for rate in args.rates:
            n = args.full_orders if rate == 0 else max(100, int(rate * args.seconds))
            before = {name: cpu_seconds(pid) for name, pid in pids.items()}
            workers_before = [cpu_seconds(pid) for pid in worker_pids]
            counters_before = worker_counters(ports)
            broker_before = sum(cpu_seconds(pid) for pid in brokers)
            sent: list[float] = []
            samples: list[Sample] = []
            sampler = (
                asyncio.create_task(sample_workers(worker_pids, ports, samples))
                if args.timeline
                else None
            )
            started = time.perf_counter()
            done, latencies = await run_orders(bus, tail, n, PRODUCTS, rate or None, watch, sent)
            took = time.perf_counter() - started
            if sampler is not None:
                sampler.cancel()
            cpu = {
                name: 100 * (cpu_seconds(pid) - before[name]) / took for name, pid in pids.items()
            }
            broker = 100 * (sum(cpu_seconds(pid) for pid in brokers) - broker_before) / took
            each = [
                100 * (cpu_seconds(pid) - was) / took
                for pid, was in zip(worker_pids, workers_before, strict=True)
            ]
            per_worker = f" ({' + '.join(f'{c:.0f}' for c in each)})" if len(each) > 1 else ""
            offered = "full load" if rate == 0 else f"{rate:g}/s"
            print(
                f"rate      {offered:>9}: {done:,.0f} sagas/s ({n} orders)  {summary_ms(latencies)}  "
                f"cpu% worker {sum(each):.0f}{per_worker} driver {cpu['driver']:.0f} broker {broker:.0f}  "
                f"load {os.getloadavg()[0]:.2f}"
            )
            print(f"  stages  {stages(counters_before, worker_counters(ports), took)}")
            print(f"  {watch.summary()}")
            for row in timeline(sent, latencies, samples, args.timeline):
                print(row)
        await watch.stop()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--rates",
        type=lambda text: [float(r) for r in text.split(",")],
        default=[10.0, 40.0, 80.0, 0.0],
        help="orders/s, comma-separated; 0 = full load",
    )
    parser.add_argument("--seconds", type=float, default=15)
    parser.add_argument("--full-orders", type=int, default=3000)
    parser.add_argument(
        "--workers", type=int, default=1, help="worker processes in the one consumer group"
    )
    parser.add_argument(
        "--timeline",
        type=float,
        default=0,
        help="also print, per this many seconds of each step, p50/p99, worker CPU and "
        "store shares (0: off)",
    )
    parser.add_argument("settings", nargs="*", help="setting=value overrides for the worker")
    asyncio.run(main(parser.parse_args()))
