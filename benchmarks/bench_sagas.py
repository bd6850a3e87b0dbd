"""Saga throughput and latency on a real broker, beside a plain aiokafka relay baseline.

    python benchmarks/bench_sagas.py [--orders 5000] [--latency-orders 2000]
        [--enrollments 5000] [--soak-seconds 0] [--workers 1]

Prints: the machine; the baseline relay's rate through 9 hops; order sagas/s at full load;
command-to-outcome latency p50/p95/p99 at half that load; enrollment sagas/s at full load
in the same run, beside the order rate; worker RSS over the run. ``--workers N`` runs N
worker processes in one consumer group (they split the partitions). Commands go straight to
Kafka through the command bus (the REST API is not measured here).

The driver stamps each order at both ends in this process, so its own pauses would be in
every latency: its garbage collector is off in each measured phase, and the longest stall
of its event loop is printed beside the figures (``BENCH_DRIVER_GC=python`` keeps Python's
collector, to compare; ``benchmarks/common.py``). The run's topics are deleted at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import time
import uuid
from datetime import UTC, datetime
from decimal import Decimal

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

import sagas.domains  # noqa: F401  (registers every domain's contracts)
from benchmarks.common import (
    RssSampler,
    StallWatch,
    c_extensions,
    driver_collector_paused,
    git_rev,
    machine,
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


async def baseline(settings: Settings, n: int) -> float:
    """Messages/s through a plain aiokafka relay chain of HOPS hops."""
    topic, done = settings.topic("relay"), settings.topic("relay-done")
    admin = AIOKafkaAdminClient(**aiokafka_options(settings))
    await admin.start()
    await admin.create_topics([NewTopic(t, settings.partitions, 1) for t in (topic, done)])
    await admin.close()
    proc = subprocess.Popen(
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


async def main(args: argparse.Namespace) -> None:
    data, settings = run_settings(
        "bench",
        step_timeout_s=120,
        reservation_ttl_s=600,
    )
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
        rate, _ = await run_orders(bus, tail, args.orders, args.products, None, watch)
        collecting = (worker_counters(ports)["gc.seconds"] - gc_before) / (args.orders / rate)
        print(
            f"sagas     full load, {args.orders} single-line orders: {rate:,.0f} sagas/s = {rate / relay_rate:.3f}x the relay chain"
            f" (worker in the garbage collector {100 * collecting:.0f}% of the time; "
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
        half = rate / 2
        _, latencies = await run_orders(bus, tail, args.latency_orders, args.products, half, watch)
        print(
            f"latency   command->outcome at half load ({half:,.0f}/s, {args.latency_orders} orders): {summary_ms(latencies)}"
            f" ({watch.summary()})"
        )
        # Enrollment sagas in the same run, on the same worker: one student per enrollment,
        # courses never full, so every saga takes the whole path to ENROLLED.
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
    asyncio.run(main(parser.parse_args()))
