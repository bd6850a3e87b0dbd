"""Saga throughput and latency on a real broker, beside a plain aiokafka relay baseline.

    python benchmarks/bench_sagas.py [--orders 5000] [--latency-orders 2000]
        [--enrollments 5000] [--soak-seconds 0] [--workers 1] [--tracing off,0.01,1.0]

Prints: the machine; the baseline relay's rate through 9 hops; order sagas/s at full load;
command-to-outcome latency p50/p95/p99 at half that load; enrollment sagas/s at full load
in the same run, beside the order rate; worker RSS over the run. ``--workers N`` runs N
worker processes in one consumer group (they split the partitions). Commands go straight to
Kafka through the command bus (the REST API is not measured here).

``--tracing off,0.01,1.0`` measures what OpenTelemetry tracing costs (issue 33): one worker
run per mode, in that order, each on topics of its own: ``off`` (SAGALINE_TRACING false), or
tracing on with that share of the orders' traces sampled (``parentbased_traceidratio``; the
driver sends no trace context, so the worker starts each order's trace), exporting over
OTLP/HTTP to the local Jaeger (``deploy/local/jaeger.sh``, started if it was not). Every mode
is loaded at half of the first mode's full-load rate for its latency, and the run ends with
each mode's full-load rate and p99 beside the off figures of the same run (the median of its
off runs: ``off,0.01,1.0,off`` brackets the traced ones). Enrollments run in the first mode
only (``--enrollments 0``: none).

The driver stamps each order at both ends in this process, so its own pauses would be in
every latency: its garbage collector is off in each measured phase, and the longest stall
of its event loop is printed beside the figures (``BENCH_DRIVER_GC=python`` keeps Python's
collector, to compare; ``benchmarks/common.py``). The run's topics are deleted at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
import urllib.parse
import urllib.request
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

import sagas.domains  # noqa: F401  (registers every domain's contracts)
from benchmarks.common import (
    RssSampler,
    StallWatch,
    c_extensions,
    cpu_seconds,
    driver_collector_paused,
    git_rev,
    machine,
    percentile,
    run_settings,
    summary_ms,
    worker_bus_tail,
    worker_counters,
)
from runtime.kafka_security import aiokafka_options
from runtime.settings import Settings
from runtime.topics import (
    DEAD_LETTERS,
    EVENTS,
    INVENTORY,
    ORDER_SAGA,
    create_topics,
    declared_topics,
)
from sagas.catalog import COURSE, ENROLLMENT_SAGA, STUDENT
from sagas.contracts.enrollment import Enroll, SetCourse, SetStudent
from sagas.contracts.ledger import SetCapacity
from sagas.contracts.orders import OrderLine, PaymentDetails, PlaceOrder
from sagas.ids import derive_id
from sagas.messages import Envelope, Message
from services.bus import CommandBus
from services.event_tail import EventTail

HOPS = 9  # place -> reserve -> reserved -> authorize -> authorized -> confirm -> confirmed -> capture -> captured
ENROLLMENT_HOPS = 7
"""enroll -> reserve seat -> seat held -> hold credits -> credits held -> confirm seat and
credits -> both confirmed (the two confirms travel in parallel)."""
COURSE_SEATS = 50
"""Every course fact carries its roster: courses of a realistic size keep facts small (a
course of 1000 seats would make each of its facts tens of KB)."""


def envelope(message: Message, key: str, saga_id: str | None = None) -> Envelope:
    return Envelope.wrap(
        message,
        message_id=uuid.uuid4().hex,
        key=key,
        saga_id=saga_id,
        occurred_at=datetime.now(UTC),
    )


def order(i: int, products: int) -> tuple[str, Envelope]:
    order_id = uuid.uuid4().hex
    place = PlaceOrder(
        customer_id=f"bench-{i % 1000}",
        lines=(OrderLine(product_id=f"p{i % products}", quantity=1, unit_price=Decimal("1.00")),),
        payment=PaymentDetails(method="card"),
    )
    env = Envelope.wrap(
        place,
        message_id=derive_id(order_id, "place"),
        key=order_id,
        saga_id=order_id,
        occurred_at=datetime.now(UTC),
    )
    return order_id, env


async def start_relay(settings: Settings, topic: str, done: str) -> subprocess.Popen[bytes]:
    """:mod:`benchmarks.relay` over ``topic`` (created here) into ``done``, HOPS hops."""
    admin = AIOKafkaAdminClient(**aiokafka_options(settings))
    await admin.start()
    await admin.create_topics([NewTopic(t, settings.partitions, 1) for t in (topic, done)])
    await admin.close()
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "benchmarks.relay",
            "--bootstrap",
            settings.kafka_bootstrap,
            "--topic",
            topic,
            "--done",
            done,
            "--hops",
            str(HOPS),
        ]
    )


async def baseline(settings: Settings, n: int) -> float:
    """Messages/s through a plain aiokafka relay chain of HOPS hops."""
    topic, done = settings.topic("relay"), settings.topic("relay-done")
    proc = await start_relay(settings, topic, done)
    consumer = AIOKafkaConsumer(done, **aiokafka_options(settings), auto_offset_reset="earliest")
    producer = AIOKafkaProducer(**aiokafka_options(settings), acks="all", linger_ms=1)
    await consumer.start()
    await producer.start()
    try:
        await asyncio.sleep(3)  # let the relay join its group
        with driver_collector_paused():
            return await _relay_rate(producer, consumer, topic, n)
    finally:
        proc.terminate()
        proc.wait()
        await consumer.stop()
        await producer.stop()


async def _relay_rate(
    producer: AIOKafkaProducer, consumer: AIOKafkaConsumer, topic: str, n: int
) -> float:
    start = time.monotonic()
    futures = [await producer.send(topic, b"0|x" * 40, key=str(i).encode()) for i in range(n)]
    await asyncio.gather(*futures)
    seen = 0
    while seen < n:
        batch = await consumer.getmany(timeout_ms=500)
        seen += sum(len(r) for r in batch.values())
    return n / (time.monotonic() - start)


async def record_counts(settings: Settings) -> dict[str, int]:
    """Records written so far to the run's topics, by kind: commands and replies (the saga
    and participant topics), domain events, table changelogs (states and input positions),
    dead letters. End offsets, summed over partitions."""
    consumer = AIOKafkaConsumer(**aiokafka_options(settings))
    await consumer.start()
    try:
        # Partitions as declared (runtime.topics): they differ by topic (one for dead
        # letters, the CDC ingest's changelog as many as Debezium's topics).
        parts = [
            TopicPartition(spec.name, p)
            for spec in declared_topics(settings)
            for p in range(spec.partitions)
        ]
        ends = await consumer.end_offsets(parts)
    finally:
        await consumer.stop()
    counts = {"commands/replies": 0, "events": 0, "changelog": 0, "dead letters": 0}
    for tp, end in ends.items():
        if tp.topic.endswith("-changelog"):
            counts["changelog"] += end
        elif tp.topic == settings.topic(EVENTS):
            counts["events"] += end
        elif tp.topic == settings.topic(DEAD_LETTERS):
            counts["dead letters"] += end
        else:
            counts["commands/replies"] += end
    return counts


async def run_orders(
    bus: CommandBus,
    tail: EventTail,
    n: int,
    products: int,
    rate: float | None,
    watch: StallWatch | None = None,
    sent: list[float] | None = None,
) -> tuple[float, list[float]]:
    """Send ``n`` orders (paced at ``rate``/s if given); returns sagas/s and latencies (and
    fills ``sent``, if given, with each order's send time, in the latencies' order). The
    driver's own collector is paused meanwhile, ``watch`` (if given) reset at the start."""
    with driver_collector_paused():
        if watch is not None:
            # The collection that starts the pause is not part of the phase: the watch
            # notes it at its next wake-up, then forgets it.
            await asyncio.sleep(2 * watch.PERIOD_S)
            watch.reset()
        return await _run_orders(bus, tail, n, products, rate, sent)


async def _run_orders(
    bus: CommandBus,
    tail: EventTail,
    n: int,
    products: int,
    rate: float | None,
    sent: list[float] | None = None,
) -> tuple[float, list[float]]:
    loop = asyncio.get_running_loop()
    sent_at: dict[str, float] = {}
    start = loop.time()
    chunk = 200 if rate is None else max(1, int(rate / 20))
    for base in range(0, n, chunk):
        items = [order(base + i, products) for i in range(min(chunk, n - base))]
        now = loop.time()
        for order_id, _ in items:
            sent_at[order_id] = now
        await bus.send_many([(ORDER_SAGA, env) for _, env in items])
        if rate is not None:
            await asyncio.sleep(max(0.0, start + (base + chunk) / rate - loop.time()))
    outcomes = await tail.wait_for(sent_at, timeout=600)
    if len(outcomes) < n:
        raise SystemExit(f"only {len(outcomes)} of {n} sagas ended")
    end = max(o.at for o in outcomes.values())
    not_confirmed = sum(o.status != "CONFIRMED" for o in outcomes.values())
    if not_confirmed:
        print(f"  note: {not_confirmed} sagas did not confirm")
    if sent is not None:
        sent.extend(sent_at.values())
    return n / (end - start), [outcomes[i].at - sent_at[i] for i in sent_at]


def enrollment(student: int, courses: int) -> tuple[str, Envelope]:
    """An enrollment of student ``s<student>`` in one of ``courses`` (never full: no waitlist)."""
    enrollment_id = uuid.uuid4().hex
    enroll = Enroll(student_id=f"s{student}", course_id=f"c{student % courses}", waitlist=False)
    env = Envelope.wrap(
        enroll,
        message_id=derive_id(enrollment_id, "enroll"),
        key=enrollment_id,
        saga_id=enrollment_id,
        occurred_at=datetime.now(UTC),
    )
    return enrollment_id, env


async def run_enrollments(bus: CommandBus, tail: EventTail, students: range, courses: int) -> float:
    """Enroll each of ``students`` once, all at once; returns sagas/s (to a settled status)."""
    with driver_collector_paused():
        return await _run_enrollments(bus, tail, students, courses)


async def _run_enrollments(
    bus: CommandBus, tail: EventTail, students: range, courses: int
) -> float:
    loop = asyncio.get_running_loop()
    start = loop.time()
    keys: list[str] = []
    for base in range(students.start, students.stop, 200):
        items = [enrollment(i, courses) for i in range(base, min(base + 200, students.stop))]
        keys += [f"enrollment:{enrollment_id}" for enrollment_id, _ in items]
        await bus.send_many([(ENROLLMENT_SAGA, env) for _, env in items])
    outcomes = await tail.wait_settled(keys, timeout=600)
    settled = [o for k, o in outcomes.items() if tail.is_settled(k)]
    if len(settled) < len(keys):
        raise SystemExit(f"only {len(settled)} of {len(keys)} enrollment sagas settled")
    not_enrolled = sum(o.status != "ENROLLED" for o in settled)
    if not_enrolled:
        print(f"  note: {not_enrolled} enrollment sagas did not enroll")
    return len(keys) / (max(o.at for o in settled) - start)


async def set_courses_and_students(bus: CommandBus, courses: int, students: int) -> None:
    """Courses of COURSE_SEATS seats, students with credits to spare."""
    await bus.send_many(
        [
            (COURSE, envelope(SetCourse(title=f"c{i}", capacity=COURSE_SEATS, credits=1), f"c{i}"))
            for i in range(courses)
        ]
    )
    for base in range(0, students, 500):
        await bus.send_many(
            [
                (STUDENT, envelope(SetStudent(name=f"s{i}", max_credits=10), f"s{i}"))
                for i in range(base, min(base + 500, students))
            ]
        )


@dataclass(frozen=True)
class Tracing:
    """One tracing mode of a run: ``off`` (SAGALINE_TRACING false), or on with a new
    trace sampled at ``ratio`` (OpenTelemetry's ``parentbased_traceidratio``: the worker
    starts each order's trace, as the driver sends no trace context)."""

    ratio: float | None

    @classmethod
    def parse(cls, text: str) -> Tracing:
        if text.strip().lower() == "off":
            return cls(None)
        ratio = float(text)
        if not 0 < ratio <= 1:
            raise argparse.ArgumentTypeError(f"a sampling ratio is in (0, 1], not {text!r}")
        return cls(ratio)

    @property
    def name(self) -> str:
        return "off" if self.ratio is None else f"on, {self.ratio:g} sampled"


def tracing_modes(text: str) -> list[Tracing]:
    return [Tracing.parse(part) for part in text.split(",") if part.strip()]


def jaeger_otlp() -> str:
    """The local Jaeger's OTLP/HTTP endpoint, Jaeger started if it was not running."""
    script = "deploy/local/jaeger.sh"
    subprocess.run([script, "start"], check=True, timeout=1800)
    return subprocess.run(
        [script, "otlp"], check=True, capture_output=True, text=True
    ).stdout.strip()


def traced_worker_env(mode: Tracing, otlp: str, service: str) -> None:
    """OpenTelemetry's variables for the workers this process starts next (they inherit
    its environment: tests/integration/harness.settings_env)."""
    for name in [n for n in os.environ if n.startswith("OTEL_")]:
        del os.environ[name]
    if mode.ratio is None:
        return
    os.environ.update(
        {
            "OTEL_EXPORTER_OTLP_ENDPOINT": otlp,
            "OTEL_TRACES_SAMPLER": "parentbased_traceidratio",
            "OTEL_TRACES_SAMPLER_ARG": f"{mode.ratio:g}",
            "OTEL_SERVICE_NAME": service,
        }
    )


def jaeger_traces(service: str) -> str:
    """How many traces of ``service`` reached the local Jaeger (the query API's answer is
    capped at its limit), a few seconds after the last span was sent."""
    query = urllib.parse.urlencode({"service": service, "limit": 2000, "lookback": "1h"})
    url = subprocess.run(
        ["deploy/local/jaeger.sh", "url"], check=True, capture_output=True, text=True
    ).stdout.strip()
    try:
        with urllib.request.urlopen(f"{url}/api/traces?{query}", timeout=60) as r:
            found = json.loads(r.read())["data"] or []
    except OSError as exc:
        return f"Jaeger not read ({exc})"
    spans = sum(len(t["spans"]) for t in found)
    return f"{len(found)}{'+' if len(found) == 2000 else ''} traces ({spans} spans) in Jaeger"


@dataclass(frozen=True)
class Figures:
    mode: Tracing
    rate: float
    latencies: list[float]
    cpu_ms: float
    """The worker's CPU time per saga at full load (user + system, its threads included):
    what tracing adds to its work, less moved by what else runs on the box than a rate."""


def jaeger_pid() -> int | None:
    try:
        return int(Path(".local/jaeger/jaeger.pid").read_text())
    except (OSError, ValueError):
        return None


async def main(args: argparse.Namespace) -> None:
    modes: list[Tracing] = args.tracing or [Tracing(None)]
    traced = args.tracing is not None
    otlp = jaeger_otlp() if any(m.ratio is not None for m in modes) else ""
    first, settings = run_settings("bench", step_timeout_s=120, reservation_ttl_s=600)
    print(
        f"machine: {machine()}\ncommit: {git_rev()}  partitions: {settings.partitions}  store: {settings.store}"
        f"  worker processes: {args.workers}"
    )
    print(f"ext       {c_extensions()}")
    print(
        f"gc        worker threshold {settings.gc_threshold or 'Python default'},"
        f" freeze {settings.gc_freeze} (SAGALINE_GC_THRESHOLD, SAGALINE_GC_FREEZE)"
    )
    print(
        f"load      1-min load average before: {os.getloadavg()[0]:.2f} (other work shares the CPUs)"
    )
    await create_topics(settings)

    relay_rate = await baseline(settings, args.orders)
    print(
        f"baseline  plain aiokafka relay, {HOPS} hops: {relay_rate:,.0f} chains/s ({relay_rate * HOPS:,.0f} hops/s)"
    )
    figures: list[Figures] = []
    for n, mode in enumerate(modes):
        data, run = (
            (first, settings)
            if n == 0
            else run_settings("bench", step_timeout_s=120, reservation_ttl_s=600)
        )
        if traced:
            service = f"sagaline-worker-{run.app_id}"
            traced_worker_env(mode, otlp, service)
            run = run.model_copy(update={"tracing": mode.ratio is not None})
            print(
                f"tracing   {mode.name} (worker {service}{', to ' + otlp if otlp and mode.ratio else ''})"
            )
            if n:
                await create_topics(run)
        half = figures[0].rate / 2 if figures else None
        jaeger = jaeger_pid() if mode.ratio is not None else None
        jaeger_cpu = cpu_seconds(jaeger) if jaeger else 0.0
        rate, latencies, cpu_ms = await measure(
            args, run, data, relay_rate, half, enrollments=n == 0
        )
        figures.append(Figures(mode, rate, latencies, cpu_ms))
        if traced and mode.ratio is not None:
            await asyncio.sleep(6)  # the batch span processor's last export (5 s schedule)
            spent = (
                f", Jaeger's CPU over the mode {cpu_seconds(jaeger) - jaeger_cpu:.1f} s"
                if jaeger
                else ""
            )
            print(f"traces    {jaeger_traces(service)}{spent}")
    if traced:
        print_cost(figures)


async def measure(
    args: argparse.Namespace,
    settings: Settings,
    data: Path,
    relay_rate: float,
    half_load: float | None,
    enrollments: bool,
) -> tuple[float, list[float], float]:
    """One worker run: warm-up, full load, latency at half load (``half_load``, or half
    of this run's full load), and the enrollments and soak if asked; its figures: the
    full-load rate, the latencies at half load, the worker's CPU ms per saga at full load."""
    async with worker_bus_tail(settings, data, args.workers) as (workers, bus, tail):
        assert workers[0].proc is not None
        rss = RssSampler(workers[0].proc.pid)
        watch = StallWatch()
        watch.start()
        await bus.send_many(
            [
                (INVENTORY, envelope(SetCapacity(on_hand=10**9), f"p{i}"))
                for i in range(args.products)
            ]
        )
        await run_orders(bus, tail, 500, args.products, None)  # warm-up
        counted = await record_counts(settings)
        ports = [w.settings.worker_web_port for w in workers]
        gc_before = worker_counters(ports)["gc.seconds"]
        pids = [w.proc.pid for w in workers if w.proc is not None]
        cpu_before = sum(cpu_seconds(p) for p in pids)
        rate, _ = await run_orders(bus, tail, args.orders, args.products, None, watch)
        cpu_ms = 1000 * (sum(cpu_seconds(p) for p in pids) - cpu_before) / args.orders
        collecting = (worker_counters(ports)["gc.seconds"] - gc_before) / (args.orders / rate)
        print(
            f"sagas     full load, {args.orders} single-line orders: {rate:,.0f} sagas/s = {rate / relay_rate:.3f}x the relay chain"
            f" (worker CPU {cpu_ms:.2f} ms per saga, in the garbage collector {100 * collecting:.0f}% of the time; "
            f"{watch.summary()})"
        )
        await asyncio.sleep(2)  # the last batches' changelog writes follow their outcomes
        after = await record_counts(settings)
        per_saga = {k: (after[k] - counted[k]) / args.orders for k in after}
        print(
            "records   per order saga (full-load run, by topic kind): "
            + ", ".join(f"{k} {v:.1f}" for k, v in per_saga.items())
            + f"; total {sum(per_saga.values()):.1f}"
        )
        half = half_load or rate / 2
        _, latencies = await run_orders(bus, tail, args.latency_orders, args.products, half, watch)
        print(
            f"latency   command->outcome at half load ({half:,.0f}/s, {args.latency_orders} orders): {summary_ms(latencies)}"
            f" ({watch.summary()})"
        )
        if enrollments and args.enrollments:
            # Enrollment sagas in the same run, on the same worker: one student per
            # enrollment, courses never full, so every saga takes the whole path to ENROLLED.
            warm, n = 500, args.enrollments
            courses = max(1, -(-(warm + n) // (COURSE_SEATS // 2)))  # half full at the end
            await set_courses_and_students(bus, courses, warm + n)
            await run_enrollments(bus, tail, range(warm), courses)  # warm-up
            enroll_rate = await run_enrollments(bus, tail, range(warm, warm + n), courses)
            print(
                f"enroll    full load, {n} enrollments ({ENROLLMENT_HOPS} hops, {courses} courses): "
                f"{enroll_rate:,.0f} sagas/s beside {rate:,.0f} order sagas/s "
                f"({enroll_rate / rate:.2f}x)"
            )
        if args.soak_seconds:
            soak_rate = args.soak_rate or half
            soak = int(soak_rate * args.soak_seconds)
            _, soak_lat = await run_orders(bus, tail, soak, args.products, soak_rate)
            print(
                f"soak      {soak} orders over ~{args.soak_seconds} s at {soak_rate:,.0f}/s: {summary_ms(soak_lat)}"
            )
        which = "worker" if args.workers == 1 else f"first of {args.workers} workers"
        await watch.stop()
        print(f"memory    {which} {rss.stop()}")
        print(f"load      1-min load average after: {os.getloadavg()[0]:.2f}")
        return rate, latencies, cpu_ms


def print_cost(figures: list[Figures]) -> None:
    """Each tracing mode's full-load rate, p99 at half load and worker CPU per saga beside
    the tracing-off figures of the same run (the medians of its off runs when it has
    several), each run, then each mode's medians when a mode ran more than once."""
    off = [f for f in figures if f.mode.ratio is None]
    if not off:
        return
    base = _medians(off)
    print(
        "cost      mode | full-load sagas/s, vs off | p99 at half load, vs off | worker CPU per saga, vs off"
    )
    for f in figures:
        _print_cost_line(f.mode.name, _medians([f]), base)
    modes = list(dict.fromkeys(f.mode for f in figures))
    if len(modes) < len(figures):
        print("cost      medians by mode:")
        for mode in modes:
            runs = [f for f in figures if f.mode == mode]
            _print_cost_line(f"{mode.name} ({len(runs)} runs)", _medians(runs), base)


def _medians(figures: list[Figures]) -> tuple[float, float, float]:
    return (
        statistics.median(f.rate for f in figures),
        statistics.median(percentile(f.latencies, 99) for f in figures),
        statistics.median(f.cpu_ms for f in figures),
    )


def _print_cost_line(
    name: str, figures: tuple[float, float, float], off: tuple[float, float, float]
) -> None:
    (rate, p99, cpu), (off_rate, off_p99, off_cpu) = figures, off
    print(
        f"cost      {name} | {rate:,.0f}, {rate / off_rate - 1:+.1%} | "
        f"{p99 * 1000:.1f} ms, {p99 / off_p99 - 1:+.1%} | {cpu:.2f} ms, {cpu / off_cpu - 1:+.1%}"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--orders", type=int, default=5000)
    parser.add_argument("--latency-orders", type=int, default=2000)
    parser.add_argument("--products", type=int, default=200)
    parser.add_argument("--enrollments", type=int, default=5000)
    parser.add_argument("--soak-seconds", type=int, default=0)
    parser.add_argument(
        "--workers", type=int, default=1, help="worker processes in the one consumer group"
    )
    parser.add_argument(
        "--soak-rate", type=float, default=0, help="orders/s during the soak (default: half load)"
    )
    parser.add_argument(
        "--tracing",
        type=tracing_modes,
        default=None,
        help="tracing modes, each a worker run of its own in this run, e.g. off,0.01,1.0: "
        "off, or on (SAGALINE_TRACING) with that share of orders sampled, exporting to the "
        "local Jaeger (deploy/local/jaeger.sh, started if needed); the half load of every "
        "mode is half the first mode's full load; enrollments run in the first mode only",
    )
    asyncio.run(main(parser.parse_args()))
