"""Shared pieces of the benchmark scripts: machine description, percentiles, RSS sampling."""

from __future__ import annotations

import asyncio
import gc
import json
import os
import platform
import statistics
import subprocess
import threading
import time
import urllib.request
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from contextlib import AsyncExitStack, asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiokafka.admin import AIOKafkaAdminClient

from benchmarks import cpushare
from runtime.kafka_security import aiokafka_options
from runtime.settings import Settings
from services.bus import CommandBus
from services.event_tail import EventTail
from tests.integration.harness import Worker, free_port


def machine() -> str:
    cpu = "unknown cpu"
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    mem_gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return (
        f"{os.cpu_count()} cores ({cpu}), {mem_gib:.0f} GiB, Python {platform.python_version()}, "
        f"{platform.system()} {platform.release()}\ncalibration: {calibration()}"
    )


def calibration(iterations: int = 10_000_000) -> str:
    """A fixed pure-Python loop's time, best of three: figures from two boxes compare by
    their ratio to it (CPython speed differs 2x between 2-core boxes here)."""
    best = float("inf")
    for _ in range(3):
        started = time.perf_counter()
        for _ in range(iterations):
            pass
        best = min(best, time.perf_counter() - started)
    return f"a {iterations:,}-iteration `for` loop takes {best:.3f} s"


def c_extensions() -> str:
    """Whether aiokafka's and Faust's compiled extensions load in this interpreter (the worker
    runs the same one, with the same environment): without them both fall back to pure
    Python record codecs and stream iterators."""
    import aiokafka.util
    from aiokafka.record import default_records

    from services.worker.faust_seam import compiled_stream_iterator

    builder = default_records.DefaultRecordBatchBuilder.__module__
    aiokafka_c = not aiokafka.util.NO_EXTENSIONS and "_crecords" in builder
    faust_c = compiled_stream_iterator()
    return (
        f"aiokafka C records {'yes' if aiokafka_c else 'NO'} ({builder}), "
        f"faust Cython stream iterator {'yes' if faust_c else 'NO'}"
    )


def percentile(values: list[float], p: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def summary_ms(values: list[float]) -> str:
    ms = [v * 1000 for v in values]
    return (
        f"p50={percentile(ms, 50):.1f} ms p95={percentile(ms, 95):.1f} ms "
        f"p99={percentile(ms, 99):.1f} ms mean={statistics.fmean(ms) if ms else float('nan'):.1f} ms"
    )


def cpu_seconds(pid: int) -> float:
    """User + system CPU of a process (its threads included), from /proc/<pid>/stat."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


@dataclass
class RssSampler:
    """Samples a process's resident memory every ``every`` seconds in a thread."""

    pid: int
    every: float = 1.0
    samples: list[tuple[float, float]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        start = time.monotonic()
        while not self._stop.wait(self.every):
            try:
                self.samples.append((time.monotonic() - start, rss_mib(self.pid)))
            except OSError:
                return

    def stop(self) -> str:
        self._stop.set()
        self._thread.join()
        if not self.samples:
            return "no samples"
        values = [v for _, v in self.samples]
        quarter = max(1, len(values) // 4)
        per_minute = [f"{v:.0f}" for t, v in self.samples if int(t) % 60 == 0][:20]
        return (
            f"RSS first-quarter avg {statistics.fmean(values[:quarter]):.0f} MiB, "
            f"last-quarter avg {statistics.fmean(values[-quarter:]):.0f} MiB, "
            f"max {max(values):.0f} MiB over {self.samples[-1][0]:.0f} s; "
            f"each minute: {' '.join(per_minute)} MiB"
        )


def git_rev() -> str:
    try:
        return subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


async def delete_run_topics(settings: Settings) -> None:
    """Every topic of a benchmark run: the declared ones and the relay's (its topic prefix),
    and the worker's own (Faust's changelogs and assignor topic, named by its app id). A run
    left them behind before 2026-11-23: 14,800 partitions on the local broker after a few
    sessions, its disk and its periodic work growing with them. Refuses the default prefix
    and app id: those are a deployment's topics, never a benchmark's."""
    defaults = Settings.model_fields
    if settings.topic_prefix == defaults["topic_prefix"].default or (
        settings.app_id == defaults["app_id"].default
    ):
        raise ValueError(
            f"refusing to delete the topics of prefix {settings.topic_prefix!r} and app id "
            f"{settings.app_id!r}: a benchmark run has its own (run_settings)"
        )
    admin = AIOKafkaAdminClient(**aiokafka_options(settings))
    await admin.start()
    try:
        prefixes = (f"{settings.topic_prefix}.", f"{settings.app_id}-")
        ours = [t for t in await admin.list_topics() if t.startswith(prefixes)]
        if ours:
            await admin.delete_topics(ours)
    finally:
        await admin.close()


def worker_counters(ports: list[int]) -> Counter[str]:
    """The worker processes' own counters (``/sagaline/metrics``), summed."""
    total: Counter[str] = Counter()
    for port in ports:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/sagaline/metrics", timeout=5) as r:
            total.update({k: float(v) for k, v in json.loads(r.read()).items()})
    return total


def run_settings(name: str, **overrides: Any) -> tuple[Path, Settings]:
    """A benchmark run's own directory (``.local/<name>-<run>``), topics, consumer group and
    worker web port, so no two runs share state; ``overrides`` are the run's other settings."""
    run = f"{name}{uuid.uuid4().hex[:6]}"
    data = Path(".local") / run
    settings = Settings(
        topic_prefix=run,
        app_id=run,
        data_dir=data / "worker-data",
        worker_web_port=free_port(),
        log_level="INFO",
        **overrides,
    )
    return data, settings


@asynccontextmanager
async def worker_bus_tail(
    settings: Settings, data: Path, workers: int = 1
) -> AsyncIterator[tuple[list[Worker], CommandBus, EventTail]]:
    """``workers`` worker processes on ``data`` (one consumer group splitting the partitions,
    each with its own data directory and web port), with a command bus and an event tail on
    their topics; all stopped on the way out, whatever happened inside, and the run's topics
    deleted."""
    data.mkdir(parents=True, exist_ok=True)
    started: list[Worker] = []
    bus, tail = CommandBus(settings), EventTail(settings)
    async with AsyncExitStack() as stack:
        # Runs last: after the workers, the bus and the tail have stopped.
        stack.push_async_callback(delete_run_topics, settings)
        for n in range(workers):
            own = settings if n == 0 else _another_worker(settings, n)
            logs = data if n == 0 else data / f"worker{n}"
            logs.mkdir(parents=True, exist_ok=True)
            worker = Worker(own, logs)
            slow = None
            if (share := cpushare.share_from_env()) is not None:
                slow = cpushare.group(f"{own.app_id}-w{n}", share)
                stack.callback(cpushare.remove, slow)  # after the worker has stopped
            worker.start()
            stack.callback(worker.stop)
            started.append(worker)
            if slow is not None and share is not None and worker.proc is not None:
                # Moved in right after it started, before it joins the group and loads
                # anything: its whole run is on the slow core.
                cpushare.enter(slow, worker.proc.pid)
                if n == 0:
                    print(cpushare.describe(slow, share), flush=True)
        await bus.start()
        stack.push_async_callback(bus.stop)
        await tail.start()
        stack.push_async_callback(tail.stop)
        yield started, bus, tail


def _another_worker(settings: Settings, n: int) -> Settings:
    """The settings of the n-th worker process of one group: the same app id and topics,
    its own data directory (RocksDB) and web port."""
    return settings.model_copy(
        update={
            "data_dir": Path(f"{settings.data_dir}-{n}"),
            "worker_web_port": free_port(),
        }
    )


# --- the load driver must not be what is measured ----------------------------------------


@contextmanager
def driver_collector_paused() -> Iterator[None]:
    """The load driver's own cyclic garbage collector, off for one measured phase.

    The driver stamps each order when it sends it and when its outcome comes off the event
    topic, in one process. Python's full collections of that process (every order's stamps,
    the event tail's state) stopped it for 140-690 ms, longer as its heap grew, about every
    7 s at 250 orders/s: it neither sent nor read meanwhile, and every order in flight had
    the pause added to its latency. That was most of the p99 of a run at half load
    (BENCHMARKS.md, "Issue 11, sixth step"). Reference counting still frees what is not in
    a cycle; the cycles a phase leaves are collected after it. The measured components keep
    their own collector settings (``SAGALINE_GC_*``). ``BENCH_DRIVER_GC=python`` leaves the
    driver's collector as Python has it, to see the difference."""
    if os.environ.get("BENCH_DRIVER_GC", "paused") == "python":
        yield
        return
    gc.collect()
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


class StallWatch:
    """The driver's longest event-loop stall since :meth:`reset`: the time a 10 ms sleep
    overran by. Printed beside each latency figure, so a driver that stalls shows (its
    stalls are in every latency it measures)."""

    PERIOD_S = 0.010

    def __init__(self) -> None:
        self.longest_s = 0.0
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._watch())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    def reset(self) -> None:
        self.longest_s = 0.0

    def summary(self) -> str:
        collector = os.environ.get("BENCH_DRIVER_GC", "paused")
        return f"driver: longest stall {1000 * self.longest_s:.0f} ms, collector {collector}"

    async def _watch(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            before = loop.time()
            await asyncio.sleep(self.PERIOD_S)
            self.longest_s = max(self.longest_s, loop.time() - before - self.PERIOD_S)
