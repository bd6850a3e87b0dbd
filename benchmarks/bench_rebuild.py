"""Rebuild throughput: ``sagaline rebuild`` over 1,000,000 events, end to end, in local mode
and on a Spark standalone cluster of two workers, each beside a raw aiokafka consume rate of
the same topic measured in the same run (and the online projector's rate, optionally).

    python -m benchmarks.bench_rebuild [--events 1000000] [--products 1000]
        [--no-cluster] [--jvm-variant OPTIONS]... [--conf-variant KEY=VALUE,...]...
        [--rounds 1] [--projector-sample 200000] [--projector-seconds 90]

1. Writes ``--events`` domain events (order sagas over 1,000 products: confirmed,
   rejected, declined, cancelled, expired, in flight; ~9 events per saga) to a fresh
   event topic with a batching aiokafka producer, as they are made (10M events do not fit
   in memory as objects).
2. Baseline: a group-less aiokafka consumer reads the whole topic (no decoding); again
   after the rebuilds, since the box is shared and its speed moves.
3. Rebuild, local mode: ``sagaline rebuild`` as a process into a fresh, migrated PostgreSQL
   database, timed from process start to exit (Spark start-up included); then once per
   ``--jvm-variant`` with those JVM options (SAGALINE_SPARK_JVM_OPTIONS) and once per
   ``--conf-variant`` with that Spark configuration (SAGALINE_SPARK_CONF), to compare them
   in one run; ``--rounds`` repeats them all, in reverse order every other round.
4. Rebuild, cluster: ``deploy/local/spark.sh submit --master spark://...`` to the master and
   two workers of ``spark.sh cluster-up`` (started here if they do not run, and stopped
   again), into another fresh database, timed from spark-submit's start to its exit.
5. Projector (``--projector-sample`` > 0): the real projector into another fresh database,
   on the same topic from the start, until it has applied that many events or
   ``--projector-seconds``.

While each rebuild runs, the RSS of its processes is sampled every 0.5 s: the driver (the
Python job and its JVM; in local mode the executors run in that JVM), the Python workers,
and on the cluster each executor's JVM (the workers' children; the daemons themselves are
not counted). The driver's heap is capped by ``spark.driver.memory`` (1g), the executors' by
``spark.executor.memory``: the topic is never collected to the driver, so none of these may
grow with the events.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import os
import statistics
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

if not __package__:  # run as a script (python benchmarks/...): make the repo importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from aiokafka import AIOKafkaProducer
from aiokafka.partitioner import DefaultPartitioner
from pydantic import ValidationError
from sqlalchemy import Engine, create_engine, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import OperationalError

from benchmarks.bench_projector import raw_consume_rate
from benchmarks.common import delete_run_topics, git_rev, machine
from readside.migrate import upgrade
from runtime.kafka_security import aiokafka_options
from runtime.settings import Settings
from runtime.topics import EVENTS, create_topics
from services.projector.runner import Projector
from tests.integration.harness import settings_env
from tests.integration.readside import PG_URL, applied_offsets, read_engine
from tests.spark.cluster import EXECUTOR_CONF, SPARK_SH
from tests.spark.history import order_stream

EVENTS_PER_ORDER = 9.1
"""Measured mean of tests.spark.history.order_history (half its orders carry the status
event for PENDING that streams written before SagaStatuses.start had); a first guess only,
more orders are made when it falls short."""


async def produce(settings: Settings, events: int, products: int) -> dict[int, int]:
    """``events`` domain events, made and written as they are made, batched per partition
    (the partition aiokafka, and the worker, would pick); the end offset per partition."""
    orders = int(events / EVENTS_PER_ORDER) + 1000
    while True:  # enough orders for ``events`` events (the mean per order is a guess)
        ends = await _write(settings, itertools.islice(_history(orders, products), events))
        if sum(ends.values()) == events:
            return ends
        orders = int(orders * 1.2)
        print(f"produce   {sum(ends.values()):,} events only: again with {orders:,} orders")
        await delete_run_topics(settings)
        await create_topics(settings)


def _history(orders: int, products: int) -> Iterator[tuple[bytes, bytes]]:
    return ((e.key.encode(), e.encode()) for e in order_stream(orders, products, seed=1))


async def _write(settings: Settings, records: Iterable[tuple[bytes, bytes]]) -> dict[int, int]:
    producer = AIOKafkaProducer(**aiokafka_options(settings), acks=1, max_batch_size=1 << 20)
    await producer.start()
    topic, partitions = settings.topic(EVENTS), list(range(settings.partitions))
    partitioner = DefaultPartitioner()
    started = time.perf_counter()
    counts = dict.fromkeys(partitions, 0)
    batches = {p: producer.create_batch() for p in partitions}
    pending: list[asyncio.Future[object]] = []
    try:
        for key, value in records:
            p = partitioner(key, partitions, partitions)
            counts[p] += 1
            if batches[p].append(key=key, value=value, timestamp=None) is None:
                pending.append(await producer.send_batch(batches[p], topic, partition=p))
                batches[p] = producer.create_batch()
                batches[p].append(key=key, value=value, timestamp=None)
                if len(pending) >= 64:  # bounded memory: wait for the broker now and then
                    await asyncio.gather(*pending)
                    pending.clear()
        for p, batch in batches.items():
            if batch.record_count():
                pending.append(await producer.send_batch(batch, topic, partition=p))
        await asyncio.gather(*pending)
    finally:
        await producer.stop()
    total, spent = sum(counts.values()), time.perf_counter() - started
    print(
        f"produce   {total:,} events made and written in {spent:.1f} s "
        f"({total / spent:,.0f} events/s, batches of up to 1 MiB per partition)"
    )
    return counts


@dataclass
class TreeRss:
    """Peak resident memory of the processes under ``roots`` (and the roots), by kind
    (:func:`_kind`), from /proc: the trees are walked every ``refresh`` seconds, the known
    processes' RSS read every ``every``."""

    roots: Sequence[int]
    every: float = 0.5
    refresh: float = 3.0
    peak_total: float = 0.0
    peak_by_kind: dict[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def stop(self) -> str:
        self._stop.set()
        self._thread.join()
        peaks = ", ".join(f"{k} {v:,.0f} MiB" for k, v in sorted(self.peak_by_kind.items()))
        return f"peak RSS {self.peak_total:,.0f} MiB ({peaks})"

    def _run(self) -> None:
        tree, walked = _tree(self.roots), time.monotonic()
        while not self._stop.wait(self.every):
            if time.monotonic() - walked > self.refresh:
                tree, walked = _tree(self.roots), time.monotonic()
            by_kind: dict[str, float] = {}
            for pid, kind in tree:
                by_kind[kind] = by_kind.get(kind, 0.0) + _rss_mib(pid)
            self.peak_total = max(self.peak_total, sum(by_kind.values()))
            for kind, mib in by_kind.items():
                self.peak_by_kind[kind] = max(self.peak_by_kind.get(kind, 0.0), mib)


def _tree(roots: Sequence[int]) -> list[tuple[int, str]]:
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found: list[tuple[int, str]] = []
    todo = [(root, "") for root in roots]
    while todo:
        pid, parent = todo.pop()
        kind = _kind(pid, parent)
        if kind and kind != "cluster daemon":
            found.append((pid, kind))
        todo.extend((child, kind) for child in children.get(pid, []))
    return found


def _kind(pid: int, parent: str) -> str:
    """What a process of a rebuild is: the driver's Python or JVM, an executor's JVM, or a
    Python worker (of an executor, or of the driver's JVM, where local mode's executors
    run); a cluster daemon (a worker: the executors' parent) is walked through, not counted,
    and so is a shell ("")."""
    try:
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""
    program = cmd.split(" ", 1)[0]
    if "java" in program:
        if "CoarseGrainedExecutorBackend" in cmd:
            return "executor jvm"
        daemon = "deploy.worker.Worker" in cmd or "deploy.master.Master" in cmd
        return "cluster daemon" if daemon else "driver jvm"  # the driver: deploy.SparkSubmit
    if "python" not in program:
        return ""
    if "pyspark.daemon" not in cmd and "pyspark.worker" not in cmd:
        return "driver python"
    return "executor python workers" if parent.startswith("executor") else "python workers"


def _rss_mib(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


@dataclass(frozen=True)
class Rebuilt:
    seconds: float
    stages: str
    """The job's own ``summary seconds`` line (its stages' times)."""
    memory: str


def rebuild(
    settings: Settings,
    url: str,
    log: Path,
    *,
    cluster: str | None = None,
    env: dict[str, str] | None = None,
) -> Rebuilt:
    """``sagaline rebuild`` as a process (``cluster`` None), or the job submitted to the
    standalone cluster at ``cluster``; its summary printed verbatim."""
    env = (
        settings_env(settings)
        | {"SAGALINE_DATABASE_URL": url, "SAGALINE_LOG_LEVEL": "WARNING"}
        | (env or {})
    )
    if cluster is None:
        command, daemons = [sys.executable, "-m", "sagaline.cli", "rebuild"], []
    else:
        command = [str(SPARK_SH), "submit", "--master", cluster, *EXECUTOR_CONF]
        daemons = _worker_pids()
    started = time.perf_counter()
    with open(log, "wb") as out:
        proc = subprocess.Popen(command, env=env, stdout=out, stderr=subprocess.STDOUT)
        rss = TreeRss([proc.pid, *daemons])
        code = proc.wait()
        memory = rss.stop()
    elapsed = time.perf_counter() - started
    output = log.read_text(errors="replace").splitlines()
    for line in output:
        if line.startswith("summary"):
            print(f"  | {line}")
    assert code == 0, f"rebuild failed ({code}):\n{log.read_text(errors='replace')[-3000:]}"
    stages = next((line for line in output if line.startswith("summary seconds")), "")
    return Rebuilt(elapsed, stages, memory)


def _worker_pids() -> list[int]:
    """The cluster's worker daemons (their children are the executors)."""
    pids = []
    for pid_file in sorted((SPARK_SH.parents[2] / ".local/spark/cluster").glob("worker-*.pid")):
        pids.append(int(pid_file.read_text().strip()))
    return pids


@contextmanager
def cluster_running() -> Iterator[str]:
    """The local standalone cluster's master URL; started here (and stopped) if needed."""
    ran_before = subprocess.run([SPARK_SH, "cluster-status"], capture_output=True).returncode == 0
    up = subprocess.run([SPARK_SH, "cluster-up"], capture_output=True, text=True)
    assert up.returncode == 0, f"the Spark cluster did not start:\n{up.stderr}"
    try:
        yield up.stdout.strip()
    finally:
        if not ran_before:
            subprocess.run([SPARK_SH, "cluster-down"], capture_output=True)


@contextmanager
def fresh_database() -> Iterator[str]:
    """A new, migrated PostgreSQL database; dropped afterwards, waiting out the autovacuum
    worker that a million fresh rows attract (a non-superuser cannot terminate it)."""
    admin = create_engine(PG_URL, isolation_level="AUTOCOMMIT")
    name = f"bench_{uuid.uuid4().hex[:12]}"
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    url = make_url(PG_URL).set(database=name).render_as_string(hide_password=False)
    try:
        upgrade(url)
        yield url
    finally:
        _drop(admin, name)
        admin.dispose()


def _drop(admin: Engine, name: str) -> None:
    for _ in range(60):
        try:
            with admin.connect() as conn:
                conn.execute(text(f'DROP DATABASE IF EXISTS "{name}"'))
            return
        except OperationalError:
            time.sleep(1)
    print(f"note      could not drop database {name}; drop it by hand")


async def projector_rate(
    settings: Settings, url: str, sample: int, seconds: float
) -> tuple[int, float]:
    """(events applied, seconds) by the real projector from the start of the topic."""
    topic = settings.topic(EVENTS)
    with read_engine(url) as engine:
        stop = asyncio.Event()
        started = time.perf_counter()
        task = asyncio.create_task(Projector(settings, engine).run(stop))
        applied = 0
        while time.perf_counter() - started < seconds and not task.done():
            applied = sum((await asyncio.to_thread(applied_offsets, engine, topic)).values())
            if applied >= sample:
                break
            await asyncio.sleep(0.05)
        elapsed = time.perf_counter() - started
        stop.set()
        await task
    return applied, elapsed


async def main(args: argparse.Namespace) -> None:
    run = uuid.uuid4().hex[:6]
    tmp = Path(f".local/bench-rebuild-{run}")
    tmp.mkdir(parents=True, exist_ok=True)
    settings = Settings(
        topic_prefix=f"benchrb{run}",
        app_id=f"benchrb{run}",
        log_level="WARNING",
        read_retention_s=0.0,  # the history is dated 2024: rebuild it all, as before
    )
    print(f"machine: {machine()}\ncommit: {git_rev()}  partitions: {settings.partitions}")
    print(
        f"postgres  {PG_URL.split('@')[-1]}  spark local: {settings.spark_master}, driver "
        f"memory {settings.spark_driver_memory}; cluster: 2 workers of 1 core, "
        f"{' '.join(EXECUTOR_CONF[1::2])}"
    )
    print(f"load      1-minute load average {os.getloadavg()[0]:.2f} at start")
    await create_topics(settings)
    try:
        ends = await produce(settings, args.events, args.products)
        total = sum(ends.values())
        raws = [await _raw(settings, ends)]
        variants = local_variants(args, settings.spark_conf)
        local = list(variants)
        modes = [m for r in range(args.rounds) for m in (local if r % 2 == 0 else local[::-1])]
        modes += [] if args.no_cluster else ["cluster"]
        runs: dict[str, list[float]] = {}
        for n, mode in enumerate(modes):
            with contextlib.ExitStack() as stack:
                master = None if mode != "cluster" else stack.enter_context(cluster_running())
                url = stack.enter_context(fresh_database())
                log = tmp / f"rebuild-{n}.log"
                done = rebuild(settings, url, log, cluster=master, env=variants.get(mode))
            runs.setdefault(mode, []).append(total / done.seconds)
            print(
                f"rebuild   {mode}: {total:,} events in {done.seconds:.1f} s end to end "
                f"(Spark start-up included) = {total / done.seconds:,.0f} events/s\n"
                f"memory    {mode}: {done.memory}"
            )
            raws.append(await _raw(settings, ends))
        rates = {mode: statistics.fmean(r) for mode, r in runs.items()}
        if args.projector_sample:
            await _projector(settings, args, total)
        raw = statistics.fmean(raws)
        print(f"load      1-minute load average {os.getloadavg()[0]:.2f} at end")
        for mode, rate in rates.items():
            verdict = "" if mode == "cluster" else (" MET" if rate / raw >= 0.06 else " MISSED")
            each = "" if len(runs[mode]) == 1 else f" (the mean of {len(runs[mode])} rebuilds)"
            print(
                f"result    {mode}: {rate:,.0f} events/s{each} = {rate / raw:.3f}x the raw "
                f"consume rate ({raw:,.0f} events/s, the mean of {len(raws)} in this run)"
                + (f"; target >= 0.06x{verdict}" if verdict else "")
            )
    finally:
        await delete_run_topics(settings)


def local_variants(
    args: argparse.Namespace, spark_conf: dict[str, str]
) -> dict[str, dict[str, str]]:
    """Each local-mode rebuild of a round, by name, with the environment it adds: the
    settings' own first, then each ``--jvm-variant`` and ``--conf-variant`` (its pairs over
    the settings' own SAGALINE_SPARK_CONF)."""
    variants: dict[str, dict[str, str]] = {"local": {}}
    for options in args.jvm_variant:
        variants[f"local {options}"] = {"SAGALINE_SPARK_JVM_OPTIONS": options}
    for name, pairs in args.conf_variant:
        variants[f"local {name}"] = {"SAGALINE_SPARK_CONF": json.dumps(spark_conf | pairs)}
    return variants


def conf_pairs(text: str) -> tuple[str, dict[str, str]]:
    """``--conf-variant``'s KEY=VALUE,... (checked before the run writes its topic)."""
    pairs = [pair.partition("=") for pair in text.split(",")]
    if not all(key and sep for key, sep, _ in pairs):
        raise argparse.ArgumentTypeError(f"{text!r}: give KEY=VALUE pairs, comma-separated")
    conf = {key: value for key, _, value in pairs}
    try:
        Settings(spark_conf=conf)
    except ValidationError as exc:  # which key, and why
        said = "; ".join(e["msg"].removeprefix("Value error, ") for e in exc.errors())
        raise argparse.ArgumentTypeError(said) from None
    return text, conf


def positive(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: give a count of 1 or more")
    return int(text)


async def _raw(settings: Settings, ends: dict[int, int]) -> float:
    raw = await raw_consume_rate(settings, ends, 2000)
    print(f"baseline  raw aiokafka consume of the topic (no decoding): {raw:,.0f} events/s")
    return raw


async def _projector(settings: Settings, args: argparse.Namespace, total: int) -> None:
    with fresh_database() as url:
        applied, seconds = await projector_rate(
            settings, url, args.projector_sample, args.projector_seconds
        )
    rate = applied / seconds
    print(
        f"projector {applied:,} events applied in {seconds:.1f} s = {rate:,.0f} events/s "
        f"(first {args.projector_sample:,} events or {args.projector_seconds:.0f} s; "
        f"batch {settings.projector_batch_size}); at that rate {total:,} events take "
        f"{total / rate:,.0f} s"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--products", type=int, default=1000)
    parser.add_argument("--no-cluster", action="store_true", help="local mode only")
    parser.add_argument(
        "--jvm-variant",
        action="append",
        default=[],
        metavar="OPTIONS",
        help="also rebuild in local mode with SAGALINE_SPARK_JVM_OPTIONS=OPTIONS (repeatable)",
    )
    parser.add_argument(
        "--conf-variant",
        action="append",
        default=[],
        type=conf_pairs,
        metavar="KEY=VALUE,...",
        help="also rebuild in local mode with that Spark configuration (SAGALINE_SPARK_CONF;"
        " repeatable)",
    )
    parser.add_argument(
        "--rounds", type=positive, default=1, help="local rebuilds of each variant, alternating"
    )
    parser.add_argument(
        "--projector-sample", type=int, default=0, help="events the projector applies (0: none)"
    )
    parser.add_argument("--projector-seconds", type=float, default=90.0)
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    asyncio.run(main(parser.parse_args()))
