"""Worker memory over a long run at half load: does RSS settle, and which part grows.

    python -m benchmarks.bench_soak [--minutes 30] [--rate N] [--products 200]
        [--sample-s 5] [--csv .local/soak-<run>.csv]

Starts the real worker process (as bench_sagas does) with its opt-in memory gauges on
(``SAGALINE_WORKER_MEMORY_METRICS``), then drives single-line order sagas straight to the
saga topic at one fixed rate for ``--minutes``: ``--rate`` orders/s if given, otherwise half
of the maximum rate measured first by a short full-load phase (as bench_sagas measures it).
Outcomes are read from the event topic. Every ``--sample-s`` seconds it records the worker's
RSS, PSS and USS (/proc/<pid>/smaps_rollup) and scrapes the worker's /metrics for RocksDB's
own memory (memtables and table readers summed over the open partitions, and the one block
cache they share less the memtables charged to it: the three add up), the
live blocks of Python's object allocator and glibc malloc's in-use and free bytes, and the
CPU seconds every worker process has used (/proc/<pid>/stat).

Prints one row per quarter of the soak (sagas completed per second, p50/p99 latency of the
orders sent in that quarter, medians of the memory samples) and the verdict
``RSS last quarter vs second quarter`` (medians; the target is within 10%), then each
minute's p99 and the workers' CPU per saga that ended in it. The samples go to ``--csv``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import csv
import functools
import multiprocessing
import os
import statistics
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

import sagas.domains  # noqa: F401  (registers every domain's contracts)
from benchmarks import soak_faults, soak_state
from benchmarks.bench_sagas import envelope, order, run_orders
from benchmarks.common import (
    _another_worker,
    calibration,
    delete_run_topics,
    git_rev,
    machine,
    percentile,
    run_settings,
)
from faults.checks import compensations, effects_once, malformed_events, sequences
from faults.history import History
from faults.topics import read_topic
from runtime.settings import Settings
from runtime.topics import EVENTS, INVENTORY, ORDER_SAGA, PAYMENT, create_topics
from sagas.contracts.ledger import SetCapacity
from services.bus import CommandBus
from services.event_tail import EventTail
from tests.integration.harness import Worker
from tests.integration.readside import ProjectorProcess, fresh_database

MIB = 1024 * 1024
WARM_UP_ORDERS = 500
ROCKSDB_KINDS = ("memtables", "table_readers", "block_cache")


class OutcomeTail(EventTail):
    """The event tail without its list of every event: a soak sees millions of them, and
    the driver's memory is not what is measured. Only outcomes are kept, and the soak pops
    them as it reads them."""

    keeps_events = False


def smaps_rollup(pid: int) -> dict[str, float]:
    """RSS, PSS, USS (private clean + dirty) and anonymous memory of ``pid``, in MiB."""
    kib: dict[str, int] = {}
    with open(f"/proc/{pid}/smaps_rollup") as f:
        for line in f:
            parts = line.split()
            if len(parts) >= 3 and parts[2] == "kB":
                kib[parts[0].rstrip(":")] = int(parts[1])
    return {
        "rss_mib": kib.get("Rss", 0) / 1024,
        "pss_mib": kib.get("Pss", 0) / 1024,
        "uss_mib": (kib.get("Private_Clean", 0) + kib.get("Private_Dirty", 0)) / 1024,
        "anon_mib": kib.get("Anonymous", 0) / 1024,
    }


def cpu_seconds(pid: int) -> float:
    """User and system CPU seconds ``pid`` has used, all its threads (/proc/<pid>/stat)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()  # after the command name, which may hold spaces
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class CpuMeter:
    """CPU seconds of a changing set of processes since the meter began (``pids`` then): a
    process that appears later (a restarted worker) counts from its own start, so a fault
    never subtracts."""

    def __init__(self, pids: list[int]) -> None:
        self._last = dict(_cpu_readings(pids))
        self.total = 0.0

    def read(self, pids: list[int]) -> float:
        for pid, now in _cpu_readings(pids):
            self.total += now - self._last.get(pid, 0.0)
            self._last[pid] = now
        return self.total


def _cpu_readings(pids: list[int]) -> list[tuple[int, float]]:
    """(pid, CPU seconds) of each of ``pids`` still running (one gone between the listing
    and the read keeps its last reading)."""
    readings = []
    for pid in pids:
        try:
            readings.append((pid, cpu_seconds(pid)))
        except (FileNotFoundError, ProcessLookupError):
            continue
    return readings


def worker_gauges(text: str) -> dict[str, float]:
    """The memory gauges of one /metrics page (see services/worker/memory.py)."""
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == "sagaline_worker_rocksdb_memory_bytes":
                out[f"rocksdb_{s.labels['kind']}_mib"] = s.value / MIB
            elif s.name == "sagaline_worker_rocksdb_sst_bytes":
                out["rocksdb_sst_mib"] = s.value / MIB
            elif s.name == "sagaline_worker_rocksdb_open_databases":
                out["rocksdb_dbs"] = s.value
            elif s.name == "sagaline_worker_python_allocated_blocks":
                out["py_blocks_k"] = s.value / 1000
            elif s.name == "sagaline_worker_malloc_bytes":
                out[f"malloc_{s.labels['state']}_mib"] = s.value / MIB
    if all(f"rocksdb_{k}_mib" in out for k in ROCKSDB_KINDS):
        out["rocksdb_mib"] = sum(out[f"rocksdb_{k}_mib"] for k in ROCKSDB_KINDS)
    return out


@dataclass
class Soak:
    """What the soak saw: memory samples, and each order's send and outcome times."""

    pid: int
    metrics_url: str
    worker_pids: Callable[[], list[int]] = list
    """The pids of every worker process now (their CPU is sampled as ``cpu_s``)."""
    start: float = 0.0
    """Monotonic time the soak phase began (samples before it are the warm-up's)."""
    seconds: float = 0.0
    phase: str = "warmup"
    samples: list[dict[str, Any]] = field(default_factory=list)
    partitions: int = 1
    sent_at: dict[str, float] = field(default_factory=dict)
    done: list[tuple[float, float, str, int]] = field(default_factory=list)
    """(sent at, ended at, status, partition) of every soak order that ended."""
    written: list[tuple[float, int]] = field(default_factory=list)
    """(written at: the outcome record's timestamp, partition) of the same orders."""
    state: list[dict[str, Any]] = field(default_factory=list)
    """Issue 25's samples: records in the stores and changelogs, SQL rows (--state-s)."""

    async def sample_forever(self, every: float) -> None:
        t0 = time.monotonic()
        cpu = CpuMeter(self.worker_pids())
        async with httpx.AsyncClient(timeout=10) as http:
            while True:
                row: dict[str, Any] = {"t_s": round(time.monotonic() - t0, 1), "phase": self.phase}
                try:
                    row.update(smaps_rollup(self.pid))
                except FileNotFoundError:  # the worker is gone: said at the end of the run
                    row["scrape_error"] = "worker gone"
                try:
                    row.update(worker_gauges((await http.get(self.metrics_url)).text))
                except httpx.HTTPError as exc:
                    row["scrape_error"] = type(exc).__name__
                row["cpu_s"] = cpu.read(self.worker_pids())
                row["completed"] = len(self.done)
                row["load1"] = os.getloadavg()[0]
                row["mono"] = time.monotonic()
                self.samples.append(row)
                await asyncio.sleep(every)

    def quarter_of(self, at: float) -> int:
        return min(3, max(0, int(4 * (at - self.start) / self.seconds)))


async def send_steadily(bus: CommandBus, soak: Soak, rate: float, products: int) -> int:
    """Orders at ``rate``/s for the soak's length, in small paced chunks (as bench_sagas
    paces its latency phase); returns how many were sent."""
    loop = asyncio.get_running_loop()
    chunk = max(1, int(rate / 20))
    sent = 0
    total = int(rate * soak.seconds)
    while sent < total:
        items = [order(sent + i, products) for i in range(min(chunk, total - sent))]
        now = loop.time()
        for order_id, _ in items:
            soak.sent_at[order_id] = now
        await bus.send_many([(ORDER_SAGA, env) for _, env in items])
        sent += len(items)
        await asyncio.sleep(max(0.0, soak.start + sent / rate - loop.time()))
    return sent


async def collect_outcomes(tail: EventTail, soak: Soak) -> None:
    """Move the soak's ended orders from the tail into ``soak.done`` once a second."""
    while True:
        for order_id in [i for i in tail.outcomes if i in soak.sent_at]:
            outcome = tail.outcomes.pop(order_id)
            partition = soak_state.partition_of(order_id, soak.partitions)
            soak.done.append((soak.sent_at.pop(order_id), outcome.at, outcome.status, partition))
            soak.written.append((outcome.written_at, partition))
        await asyncio.sleep(1)


def median(rows: list[dict[str, Any]], key: str) -> float:
    values = [r[key] for r in rows if key in r]
    return statistics.median(values) if values else float("nan")


def quarter_table(soak: Soak) -> tuple[list[str], dict[int, list[dict[str, Any]]]]:
    quarter_s = soak.seconds / 4
    by_q: dict[int, list[dict[str, Any]]] = {
        q: [
            r
            for r in soak.samples
            if r["phase"] == "soak" and soak.quarter_of(r["mono"]) == q and r["mono"] >= soak.start
        ]
        for q in range(4)
    }
    lines = [
        "quarter  sagas/s   p50 ms   p99 ms | RSS MiB  USS MiB  anon MiB | py blocks k  malloc used/free MiB"
        " | RocksDB MiB (memtables+readers+cache)  SST MiB  load",
    ]
    for q in range(4):
        rows = by_q[q]
        ended = [d for d in soak.done if soak.quarter_of(d[1]) == q]
        lat = [(end - sent) * 1000 for sent, end, *_ in soak.done if soak.quarter_of(sent) == q]
        lines.append(
            f"Q{q + 1}      {len(ended) / quarter_s:7.1f}  {percentile(lat, 50):7.1f}  {percentile(lat, 99):7.1f}"
            f" | {median(rows, 'rss_mib'):7.1f}  {median(rows, 'uss_mib'):7.1f}  {median(rows, 'anon_mib'):8.1f}"
            f" | {median(rows, 'py_blocks_k'):11.1f}  {median(rows, 'malloc_in_use_mib'):6.1f}/{median(rows, 'malloc_free_mib'):<6.1f}"
            f"       | {median(rows, 'rocksdb_mib'):6.1f} ({median(rows, 'rocksdb_memtables_mib'):.1f}"
            f"+{median(rows, 'rocksdb_table_readers_mib'):.1f}+{median(rows, 'rocksdb_block_cache_mib'):.1f})"
            f"              {median(rows, 'rocksdb_sst_mib'):7.1f}  {median(rows, 'load1'):4.2f}"
        )
    return lines, by_q


def change(by_q: dict[int, list[dict[str, Any]]], key: str) -> tuple[float, float, float]:
    second, last = median(by_q[1], key), median(by_q[3], key)
    return second, last, (last - second) / second * 100 if second else float("nan")


CHANNELS = (ORDER_SAGA, PAYMENT)
"""The channels whose keys and changelog records the soak counts (issue 25)."""


async def sample_state(
    soak: Soak, settings: Settings, workers: list[Worker], database_url: str, every: float
) -> None:
    """Every ``every`` s: the order-saga and payment records counted from the workers'
    stores and from their changelogs (offset 0 to the end), the SST bytes of every worker,
    and the read side's rows. The counting runs in a process of its own (spawned, so that
    it inherits neither this loop nor its threads), at the lowest CPU priority."""
    loop = asyncio.get_running_loop()
    dirs = [w.settings.data_dir for w in workers]
    # Niced: the counting is the observer, and its bursts (reading every changelog from
    # offset 0) must not take the CPU from the orders whose latency the soak measures.
    spawn = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(1, mp_context=spawn, initializer=os.nice, initargs=(19,)) as pool:
        async with httpx.AsyncClient(timeout=10) as http:
            while True:
                started = time.monotonic()
                row: dict[str, Any] = {"t_s": round(started - soak.start, 1), "mono": started}
                count = functools.partial(
                    soak_state.count_once, dirs, settings, CHANNELS, database_url
                )
                row |= await loop.run_in_executor(pool, count)
                sst = 0.0
                for w in workers:
                    url = f"http://127.0.0.1:{w.settings.worker_web_port}/metrics"
                    with contextlib.suppress(httpx.HTTPError):
                        sst += worker_gauges((await http.get(url)).text).get("rocksdb_sst_mib", 0.0)
                row["sst_mib_all_workers"] = round(sst, 1)
                row["phase"] = soak.phase
                soak.state.append(row)
                await asyncio.sleep(max(0.0, every - (time.monotonic() - started)))


LOADED_AFTER_FAULT_MIN = 1.0
"""A fault's recovery (30-45 s here) is timed under the soak's load only when the load goes
on that long after it: run 8 restarted a worker at minute 29.5 of 30 and its recovery ran
mostly after the last order, 1.25x faster than the one at minute 10."""


def fault_plan(
    args: argparse.Namespace, workers: list[Worker]
) -> list[tuple[float, Callable[[], object]]]:
    """The SIGKILL (the second worker) and the restarts on an empty data directory (the
    last worker) at their minutes."""
    plan: list[tuple[float, Callable[[], object]]] = []
    if args.kill_at_min and len(workers) > 1:
        victim, minute = workers[1], float(args.kill_at_min)
        survivors = [w for w in workers if w is not victim]
        kill = functools.partial(soak_faults.sigkill, victim, minute, 60.0, survivors)
        plan.append((minute, kill))
    for minute in args.recover_at_min:
        plan.append((minute, functools.partial(soak_faults.empty_restart, workers[-1], minute)))
    return plan


def by_q_of(soak: Soak, rows: list[dict[str, Any]]) -> dict[int, list[dict[str, Any]]]:
    return {
        q: [r for r in rows if r["mono"] >= soak.start and soak.quarter_of(r["mono"]) == q]
        for q in range(4)
    }


def print_state(
    soak: Soak,
    by_q: dict[int, list[dict[str, Any]]],
    data: Path,
    events: list[soak_faults.Event],
) -> None:
    """Issue 25's verdicts: each count's last quarter against its second (medians), every
    quarter's p99, the deadline index's keys at each rebuild."""
    if not soak.state:
        return
    keys = [k for k in soak.state[-1] if k not in {"t_s", "mono", "phase"}]
    print("state samples (t_s " + " ".join(keys) + "):")
    for row in soak.state:
        print(f"  {row['t_s']:7.0f} " + " ".join(str(row.get(k, "-")) for k in keys))
    for key in keys:
        second, last, pct = change(by_q, key)
        verdict = "ok" if abs(pct) <= 10 else "MISSED"
        print(
            f"  {key:<26} Q2 {second:10.1f}  Q4 {last:10.1f}  {pct:+6.1f}%  (target within 10%: {verdict})"
        )
    p99s = []
    for q in range(4):
        lat = [(end - sent) * 1000 for sent, end, *_ in soak.done if soak.quarter_of(sent) == q]
        p99s.append(percentile(lat, 99))
    shown = "  ".join(f"Q{q + 1} {p:.0f} ms" for q, p in enumerate(p99s))
    verdict = "ok" if all(p <= 150 for p in p99s) else "MISSED"
    print(f"p99 per quarter: {shown}  (target <= 150 ms in each: {verdict})")
    if events:
        print_p99_outside_faults(soak, events)
    print_p99_per_minute(soak)
    rebuilds = soak_state.deadline_rebuilds(sorted(data.rglob("worker-*.log")))
    print(f"deadline index rebuilds: {len(rebuilds)} (channel: keys, in time order)")
    for channel in sorted({r.channel for r in rebuilds}):
        counts = [str(r.keys) for r in rebuilds if r.channel == channel]
        print(f"  {channel}: {' '.join(counts[-40:])}")


def print_p99_per_minute(soak: Soak) -> None:
    """p99 of the orders sent in each minute of the soak: where within a quarter it rose."""
    by_minute: dict[int, list[float]] = {}
    for sent, end, *_ in soak.done:
        by_minute.setdefault(int((sent - soak.start) // 60), []).append((end - sent) * 1000)
    shown = " ".join(f"{percentile(by_minute[m], 99):.0f}" for m in sorted(by_minute))
    print(f"p99 per minute (ms, the orders sent in it): {shown}")
    print(f"worker CPU per minute (ms a saga ended in it, every worker): {cpu_per_minute(soak)}")


def cpu_per_minute(soak: Soak) -> str:
    """Each soak minute's worker CPU (every worker process, from the samples at its ends)
    over the sagas that ended in it: what a saga costs, retirement's ticks included."""
    rows = [r for r in soak.samples if r["phase"] == "soak" and "cpu_s" in r]
    by_minute: dict[int, list[dict[str, Any]]] = {}
    for r in rows:
        by_minute.setdefault(int((r["mono"] - soak.start) // 60), []).append(r)
    shown = []
    for m in sorted(by_minute):
        first, last = by_minute[m][0], by_minute[m][-1]
        ended = last["completed"] - first["completed"]
        cpu = last["cpu_s"] - first["cpu_s"]
        shown.append(f"{1000 * cpu / ended:.2f}" if ended > 0 else "-")
    return " ".join(shown)


def print_p99_outside_faults(soak: Soak, events: list[soak_faults.Event]) -> None:
    """Every quarter's p99 again without the orders sent while a scheduled fault had a worker
    away (from the fault until its worker was ready again plus the window's tail): those
    wait for the session timeout and the rebalances by design, and are timed per fault."""
    shown = []
    for q in range(4):
        sent_in_q = [d for d in soak.done if soak.quarter_of(d[0]) == q]
        kept = [
            (end - sent) * 1000
            for sent, end, *_ in sent_in_q
            if not soak_faults.in_window(sent, events)
        ]
        shown.append(
            f"Q{q + 1} {percentile(kept, 99):.0f} ms ({len(sent_in_q) - len(kept)} of {len(sent_in_q)} left out)"
        )
    print(
        "p99 per quarter outside the fault windows (from each fault until"
        f" {soak_faults.WINDOW_AFTER_READY_S:g} s after its worker was ready): " + "  ".join(shown)
    )


def write_csv(path: Path, samples: list[dict[str, Any]]) -> None:
    keys: list[str] = []
    for row in samples:
        keys += [k for k in row if k not in keys and k != "mono"]
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=keys, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(samples)


def issue25_settings(args: argparse.Namespace) -> dict[str, Any]:
    """The run's retentions shortened to ``--retention-s`` (its records retire, their
    markers go, finished sagas leave the read side within the run), standbys with several
    workers, and a deadline index rebuilt every ``--rescan-s`` so its keys can be seen."""
    overrides: dict[str, Any] = {}
    if args.retention_s:
        overrides |= {
            "retire_after_s": args.retention_s,
            "retired_marker_s": 2 * args.retention_s,
            "read_retention_s": args.retention_s,
            "deadline_rescan_s": args.rescan_s,
        }
    if args.workers > 1:
        overrides["table_standby_replicas"] = 1
    return overrides


async def print_history_checks(settings: Settings) -> int:
    """The fault harness's checks of the event topic, read whole: no two different events
    with one sequence number, every effect once, every compensation where it is owed,
    nothing malformed (faults/checks.py). With the workers' faults of the soak, what a lost
    or doubled write would leave in the events shows here. Returns the violations found."""
    records = await read_topic(settings.kafka_bootstrap, settings.topic(EVENTS))
    history = History.of(records, skip=set())
    found = [
        *sequences(history),
        *effects_once(history),
        *compensations(history),
        *malformed_events(history),
    ]
    print(
        f"checks    the fault harness's checks of all {len(records):,} events (sequences,"
        f" effects once, compensations, well-formed): {len(found)} violations"
    )
    for violation in found[:5]:
        print(f"          {violation.kind}: {violation.subject}: {violation.detail}"[:300])
    return len(found)


async def main(args: argparse.Namespace) -> None:
    data, settings = run_settings(
        "soak",
        step_timeout_s=120,
        reservation_ttl_s=600,
        worker_memory_metrics=True,
        **issue25_settings(args),
    )
    csv_path = Path(args.csv or f"{data}.csv")
    print(
        f"machine: {machine()}\ncommit: {git_rev()}  partitions: {settings.partitions}  store: {settings.store}"
        f"  stores span {settings.store_every_ms} ms"
        f"  rocksdb: one budget of {settings.rocksdb_memory_mb} MiB, write buffer {settings.rocksdb_write_buffer_mb} MiB x 2 per partition"
    )
    print(
        f"load      1-min load average before: {os.getloadavg()[0]:.2f} (other work shares the CPUs)"
    )
    await create_topics(settings)
    if args.retention_s:
        await soak_state.shorten_changelogs(settings, CHANNELS, args.retention_s, args.segment_s)
        print(
            f"retention {args.retention_s:g} s (shortened for this run): records retire after it,"
            f" markers are deleted {2 * args.retention_s:g} s later, the read side forgets"
            f" finished sagas after it; changelogs {soak_state.shortened_changelog_config(args.retention_s, args.segment_s)}"
        )
    data.mkdir(parents=True, exist_ok=True)
    extras = ExitStack()
    database_url = ""
    if args.projector:
        url = extras.enter_context(fresh_database("postgresql", data))
        settings = settings.model_copy(update={"database_url": url})
        projector = ProjectorProcess(settings, data)
        projector.start()
        extras.callback(projector.stop)
        database_url = url
    workers = [Worker(settings, data)]
    for n in range(1, args.workers):
        (data / f"worker{n}").mkdir(exist_ok=True)
        workers.append(Worker(_another_worker(settings, n), data / f"worker{n}"))
    for w in workers:
        w.start()
    worker = workers[0]
    assert worker.proc is not None
    print(
        f"workers   {len(workers)}, standbys {settings.table_standby_replicas} (memory: the first's)"
    )
    soak = Soak(
        worker.proc.pid,
        f"http://127.0.0.1:{settings.worker_web_port}/metrics",
        seconds=args.minutes * 60,
        partitions=settings.partitions,
        worker_pids=lambda: [w.proc.pid for w in workers if w.proc is not None],
    )
    sampler = asyncio.create_task(soak.sample_forever(args.sample_s))
    states = asyncio.create_task(sample_state(soak, settings, workers, database_url, args.state_s))
    events: list[soak_faults.Event] = []
    bus, tail = CommandBus(settings), OutcomeTail(settings)
    await bus.start()
    await tail.start()
    violations = 0
    try:
        await bus.send_many(
            [
                (INVENTORY, envelope(SetCapacity(on_hand=10**9), f"p{i}"))
                for i in range(args.products)
            ]
        )
        # The warm-up goes at the soak's rate when it is given: sent at once, its 500 sagas'
        # records would retire together a retention later, and their markers go together
        # after that, a burst of ticks inside the soak's first minutes (BENCHMARKS.md, "What
        # retirement costs one worker"). Without --rate the max-rate phase is such a burst
        # anyway: its figures for Q1 say so.
        await run_orders(bus, tail, WARM_UP_ORDERS, args.products, args.rate or None)
        if args.rate:
            print(f"warm-up   {WARM_UP_ORDERS} orders at {args.rate:,.1f}/s")
        else:
            print(
                f"warm-up   {WARM_UP_ORDERS} orders at once; with the max-rate phase after it,"
                " their records retire in a burst in the soak's first minutes when they retire"
                " within it (--retention-s)"
            )
        if args.rate:
            rate = args.rate
            print(f"rate      {rate:,.1f} orders/s, given by --rate (no max-rate phase)")
        else:
            soak.phase = "max-rate"
            full, _ = await run_orders(bus, tail, args.max_orders, args.products, None)
            rate = full / 2
            print(
                f"rate      {rate:,.1f} orders/s = half of {full:,.1f} sagas/s measured at full load"
                f" ({args.max_orders} single-line orders, this run)"
            )
        tail.outcomes.clear()
        print(
            f"soak      {args.minutes} min at {rate:,.1f} orders/s over {args.products} products,"
            f" sampling every {args.sample_s:g} s"
        )
        soak.phase = "soak"
        soak.start = asyncio.get_running_loop().time()
        collector = asyncio.create_task(collect_outcomes(tail, soak))
        plan = fault_plan(args, workers)
        for minute, _ in plan:
            if minute > args.minutes - LOADED_AFTER_FAULT_MIN:
                print(
                    f"warning   the fault at minute {minute:g} is followed by less than"
                    f" {LOADED_AFTER_FAULT_MIN:g} min of load: its recovery is timed on an"
                    " idle box, not beside the soak (run 8's 34.6 s against 43.1 s)"
                )
        faults = asyncio.create_task(soak_faults.at_minutes(soak.start, plan, events))
        sent = await send_steadily(bus, soak, rate, args.products)
        deadline = time.monotonic() + 120
        while soak.sent_at and time.monotonic() < deadline:  # the last orders' outcomes
            await asyncio.sleep(1)
        soak.phase = "drain"
        collector.cancel()
        await asyncio.gather(collector, return_exceptions=True)
        not_confirmed = sum(status != "CONFIRMED" for _, _, status, _ in soak.done)
        print(
            f"orders    {sent} sent, {len(soak.done)} ended ({not_confirmed} not CONFIRMED),"
            f" {len(soak.sent_at)} without an outcome 120 s after the last send"
        )
        for n, w in enumerate(workers):
            code = w.proc.poll() if w.proc is not None else None
            if code is not None:  # every planned fault ends with its worker started again
                print(
                    f"WORKER    worker {n} exited on its own (code {code}): see its log;"
                    " the run's figures after that are a smaller group's"
                )
        violations = await print_history_checks(settings)
        dbs = int(median(soak.samples[-3:], "rocksdb_dbs"))
        budget = settings.rocksdb_memory_mb
        print(
            f"rocksdb   {dbs} databases open (tables x partitions), sharing one budget of"
            f" {budget} MiB: block cache, index and filter blocks, and memtables (up to"
            f" {budget // 2} MiB) charged to it; soft, whatever the number of databases"
            " (table readers outside it: small, the index and filter blocks are inside)"
        )
        lines, by_q = quarter_table(soak)
        for line in lines:
            print(line)
        second, last, pct = change(by_q, "rss_mib")
        print(
            f"RSS last quarter vs second quarter: {pct:+.1f}% (target <= 10%)"
            f"  [medians {second:.1f} -> {last:.1f} MiB]"
        )
        for key, what in (
            ("uss_mib", "USS"),
            ("anon_mib", "anonymous"),
            ("rocksdb_mib", "RocksDB memory"),
            ("rocksdb_memtables_mib", "  memtables"),
            ("rocksdb_table_readers_mib", "  table readers"),
            ("rocksdb_block_cache_mib", "  block cache"),
            ("py_blocks_k", "Python blocks (k)"),
            ("malloc_in_use_mib", "malloc in use"),
            ("malloc_free_mib", "malloc free"),
            ("rocksdb_sst_mib", "SST files (disk)"),
        ):
            a, b, p = change(by_q, key)
            print(f"  {what:<18} Q2 {a:9.1f}  Q4 {b:9.1f}  {p:+6.1f}%")
        await faults
        for event in events:
            print(soak_faults.describe(event, soak.done, soak.written, settings.partitions))
        print_state(soak, by_q_of(soak, soak.state), data, events)
        print(f"load      1-min load average after: {os.getloadavg()[0]:.2f}")
        print(f"calibration at the end: {calibration()}")
    finally:
        sampler.cancel()
        states.cancel()
        await asyncio.gather(sampler, states, return_exceptions=True)
        write_csv(csv_path.with_suffix(".state.csv"), soak.state)
        write_csv(csv_path, soak.samples)
        print(f"csv       {len(soak.samples)} samples in {csv_path}")
        await tail.stop()
        await bus.stop()
        for w in workers:
            w.stop()
        extras.close()
        if violations:
            # What explains a violation is in the changelogs beside the kept data
            # directories (faults/stores.py reads both): they stay, and say so.
            print(
                f"kept      the run's topics (prefix {settings.topic_prefix}): {violations} violations"
            )
        else:
            await delete_run_topics(settings)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--minutes", type=float, default=30)
    parser.add_argument(
        "--rate",
        type=float,
        default=0,
        help="orders/s during the soak; without it, half of a max rate measured first",
    )
    parser.add_argument("--max-orders", type=int, default=2000, help="orders of the max-rate phase")
    parser.add_argument("--products", type=int, default=200)
    parser.add_argument("--sample-s", type=float, default=5)
    parser.add_argument("--csv", default="", help="samples file (default .local/soak<run>.csv)")
    issue25 = parser.add_argument_group("issue 25: state, disk and recovery bounded by live work")
    issue25.add_argument(
        "--workers", type=int, default=1, help="worker processes (standbys: 1 with several)"
    )
    issue25.add_argument(
        "--retention-s",
        type=float,
        default=0,
        help="retentions shortened to this (0: the defaults)",
    )
    issue25.add_argument(
        "--segment-s",
        type=float,
        default=0,
        help="with --retention-s: the changelogs' segments roll this often (0: a quarter of it)",
    )
    issue25.add_argument(
        "--rescan-s", type=float, default=120, help="deadline index rebuilt this often"
    )
    issue25.add_argument(
        "--projector", action="store_true", help="a projector into a fresh PostgreSQL database"
    )
    # Not 60: a changelog's count is a sawtooth with the period of its segments' roll
    # (segment.ms, 15 s in a soak of a minute's retention: the active segment fills, rolls,
    # and is compacted). Counted at that very period, run 7 read one phase of it for eight
    # minutes and another for the next ten; 37 s, prime to 15 and 60, spreads the counts over it.
    issue25.add_argument(
        "--state-s", type=float, default=37, help="how often the state is counted (s)"
    )
    issue25.add_argument(
        "--kill-at-min", type=float, default=0, help="SIGKILL the second worker then"
    )
    issue25.add_argument(
        "--recover-at-min",
        type=float,
        nargs="*",
        default=[],
        help="restart the last worker on an empty data directory then",
    )
    asyncio.run(main(parser.parse_args()))
