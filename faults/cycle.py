"""One cycle: a fresh stack, load with faults, drain, observe, check."""

from __future__ import annotations

import asyncio
import random
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy import select

from faults.checks import Observed, ReadModels, Violation, check_all, dead_letter_sources
from faults.history import History
from faults.inject import PROCESS_FAULTS, Deck, Fault, Incident, Injector, pick_worker
from faults.load import EnrollmentLoad, LoadDriver
from faults.poison import POISON_CHANNELS, POISON_KINDS
from faults.procs import Broker, crashes
from faults.stack import Stack, create_database, cycle_api_key, cycle_settings, drop_database
from faults.topics import committed_offsets, end_offsets, position_lag, read_topic
from faults.traffic import TrafficLoad, started_bus, traffic_loads
from readside import codec, queries, schema
from readside.engine import create_read_engine
from runtime.topics import DEAD_LETTERS, EVENTS, ORDER_SAGA, changelog_topic
from sagas.catalog import READ_MODELS, running_channels
from sagas.messages import ContractError, Envelope
from sagas.projections.orders import ORDERS
from sagas.projections.stock import PRODUCT_STOCK
from services.api.idempotency import idempotency_namespace

PRODUCTS = 4
STOCK_START = 400
COURSES = {"course-0": 3, "course-1": 4, "course-2": 5}
"""Course id -> seats: small, so courses fill, waitlists form and drops promote."""
COURSE_CREDITS = 3
STUDENTS = 12
MAX_CREDITS = 9
"""Three courses' worth: some enrollments are refused for credits, too."""
DRAIN_TIMEOUT_S = 90.0
"""Longer than the step timeout plus a rebalance: a saga whose reply was lost resolves by
its timeout inside it; an order still not final after it was lost."""
SETTLE_TIMEOUT_S = 30.0


@dataclass
class Decks:
    """Shared across cycles, so every kind comes up several times in a run; drawn from
    generators seeded by the run's seed only, so ``--seed`` replays the plan."""

    process: Deck
    poison: Deck
    workers: random.Random
    """Which worker a worker fault hits: a generator of its own, so the decks deal the same
    kinds for a seed whatever the number of workers."""

    @classmethod
    def new(cls, seed: int) -> Decks:
        rng = random.Random(seed)
        kinds = tuple(f"{k}@{c}" for k in POISON_KINDS for c in POISON_CHANNELS)
        return cls(Deck(PROCESS_FAULTS, rng), Deck(kinds, rng), random.Random(f"{seed}/workers"))


@dataclass
class CycleResult:
    number: int
    seconds: float
    faults: list[Fault]
    incidents: list[Incident]
    attempted: int
    accepted: int
    final: int
    violations: list[Violation]
    logs: list[str]
    client_stats: dict[str, int] = field(default_factory=dict)
    enrollments_accepted: int = 0
    enrollments_settled: int = 0
    store_check: str = ""
    """What the end-of-cycle check of every worker's stores read (its findings are among
    the violations)."""


@dataclass
class Cycle:
    number: int
    run_id: str
    broker: Broker
    log_dir: Path
    decks: Decks
    rng: random.Random
    load_s: float
    workers: int = 1
    standbys: int | None = None
    """The workers' table standby replicas (None: the setting's default)."""
    process_faults: int = 3
    poison_faults: int = 5
    t0: float = 0.0
    """When the load started: fault times are relative to it."""

    async def run(self) -> CycleResult:
        started = time.monotonic()
        self.log_dir.mkdir(parents=True, exist_ok=True)
        db_name, db_url = await asyncio.to_thread(create_database)
        stack: Stack | None = None
        injector: Injector | None = None
        try:
            settings = cycle_settings(
                self.broker.bootstrap, self.run_id, self.number, self.log_dir, db_url, self.standbys
            )
            stack = await asyncio.to_thread(Stack.create, settings, self.log_dir, self.workers)
            injector = Injector(stack, self.broker, self.rng, lambda: time.monotonic() - self.t0)
            for service in stack.services:
                if not await asyncio.to_thread(stack.start, service.name):
                    raise RuntimeError(f"{service.name} did not start; see {service.log}")
            await injector.start()
            result = await self._exercise(stack, injector, db_url)
        finally:
            if injector is not None:
                await injector.stop()
            if stack is not None:
                await asyncio.to_thread(stack.stop_all)
            await asyncio.to_thread(drop_database, db_name)
        result.seconds = time.monotonic() - started
        return result

    async def _exercise(self, stack: Stack, injector: Injector, db_url: str) -> CycleResult:
        products = [f"sku-{i}" for i in range(PRODUCTS)]
        limits = httpx.Limits(max_connections=50)
        key = await asyncio.to_thread(cycle_api_key, stack.settings)
        async with httpx.AsyncClient(
            base_url=stack.api_url,
            timeout=15,
            limits=limits,
            headers={"Authorization": f"Bearer {key}"},
        ) as http:
            namespace = idempotency_namespace(key)
            driver = LoadDriver(http, products, self.rng, namespace)
            students = [f"student-{i}" for i in range(STUDENTS)]
            enrolling = EnrollmentLoad(http, list(COURSES), students, self.rng, namespace)
            await self._set_stock(driver, http, products)
            await self._set_courses_and_students(driver, http, students)
            # Every domain that declares its traffic (faults/traffic.py), beside the above.
            loads = traffic_loads(f"{self.run_id}-{self.number}", self.rng)
            bus = await started_bus(stack.settings)
            await asyncio.gather(*(load.setup(bus) for load in loads))
            stop_supervising = asyncio.Event()
            supervisor = asyncio.create_task(injector.supervise(stop_supervising))
            self.t0 = time.monotonic()
            faults = asyncio.create_task(self._inject(injector))
            try:
                await asyncio.gather(
                    driver.run(self.load_s),
                    enrolling.run(self.load_s),
                    *(load.run(bus, self.load_s) for load in loads),
                )
                await faults
                await self._all_up(stack)
                api_orders = await self._drain(http, driver)
                await self._drain_enrollments(http, enrolling)
            finally:  # on an interrupt too: nothing may restart what the cleanup stops
                stop_supervising.set()
                faults.cancel()
                await asyncio.gather(supervisor, faults, return_exceptions=True)
                await bus.stop()
            observed = await self._observe(stack, injector, driver, http, api_orders, db_url, loads)
            observed.enrollments = enrolling.attempts
            observed.api_enrollments = await self._get_enrollments(http, enrolling)
            store_check = await asyncio.to_thread(injector.check_every_worker_store)
        violations = check_all(observed) + [
            Violation("store-ahead-of-changelog", f"{worker} tables", m)
            for worker, m in injector.store_mismatches
        ]
        violations += [v for load in loads for v in load.violations(observed.history)]
        logs = [log for s in stack.services for log in sorted(s.log_dir.glob(f"{s.name}-*.log"))]
        violations += [Violation("service-crashed", log, line) for log, line in crashes(logs)]
        accepted = driver.accepted
        return CycleResult(
            number=self.number,
            seconds=0.0,
            faults=injector.faults,
            incidents=injector.incidents,
            attempted=len(driver.attempts),
            accepted=len(accepted),
            final=sum(1 for a in accepted if api_orders.get(a.order_id, {}).get("final")),
            violations=violations,
            logs=[str(s.log_dir / f"{s.name}-*.log") for s in stack.services]
            + [str(self.broker.home / "logs" / "server.log")],
            client_stats=dict(sum((load.stats for load in loads), driver.stats + enrolling.stats)),
            enrollments_accepted=len(enrolling.accepted),
            store_check=store_check,
            enrollments_settled=sum(
                1
                for a in enrolling.accepted
                if observed.api_enrollments.get(a.enrollment_id, {}).get("settled")
            ),
        )

    async def _set_stock(
        self, driver: LoadDriver, http: httpx.AsyncClient, products: list[str]
    ) -> None:
        for product in products:
            response = await driver.post(
                f"/products/{product}/stock", {"on_hand": STOCK_START}, f"stock-{product}", "PUT"
            )
            if response is None or response.status_code != 202:
                raise RuntimeError(f"could not set the stock of {product}: {response}")
            token = response.json()["consistency_token"]
            seen = await http.get(
                f"/products/{product}/stock", params={"consistency_token": token, "wait": 30}
            )
            if seen.status_code != 200 or seen.json()["on_hand"] != STOCK_START:
                raise RuntimeError(f"stock of {product} not projected: {seen.text}")

    async def _set_courses_and_students(
        self, driver: LoadDriver, http: httpx.AsyncClient, students: list[str]
    ) -> None:
        puts = [
            (f"/courses/{c}", {"title": c, "capacity": n, "credits": COURSE_CREDITS}, "roster")
            for c, n in COURSES.items()
        ] + [
            (f"/students/{s}", {"name": s, "max_credits": MAX_CREDITS}, "enrollments")
            for s in students
        ]

        async def put(path: str, body: dict[str, Any], read: str) -> None:
            response = await driver.post(path, body, f"set-{path}", "PUT")
            if response is None or response.status_code != 202:
                raise RuntimeError(f"could not PUT {path}: {response}")
            token = response.json()["consistency_token"]
            seen = await http.get(f"{path}/{read}", params={"consistency_token": token, "wait": 30})
            if seen.status_code != 200:
                raise RuntimeError(f"{path} not projected: {seen.text}")

        await asyncio.gather(*(put(*p) for p in puts))

    async def _inject(self, injector: Injector) -> None:
        """Process faults one after the other, poison records at random moments meanwhile,
        all inside the load window; a fault that does not fit goes back in its deck."""
        plan = [self.decks.process.deal() for _ in range(self.process_faults)]
        # One broker kill per cycle at most: it is the slowest fault.
        while plan.count("kill-broker") > 1:
            plan.remove("kill-broker")
            self.decks.process.put_back("kill-broker")
        window = self.load_s - 2.0
        poisons = [self.decks.poison.deal() for _ in range(self.poison_faults)]
        times = sorted(self.rng.uniform(1.0, window) for _ in poisons)

        targets = [pick_worker(fault, self.workers, self.decks.workers) for fault in plan]

        async def process_faults() -> None:
            for i, (fault, target) in enumerate(zip(plan, targets, strict=True)):
                await asyncio.sleep(self.rng.uniform(1.0, max(1.0, window / len(plan) - 3.0)))
                if injector.clock() >= window:
                    for rest in reversed(plan[i:]):
                        self.decks.process.put_back(rest)
                    return
                await injector.process_fault(fault, target)

        async def poison_records() -> None:
            for at, card in zip(times, poisons, strict=True):
                await asyncio.sleep(max(0.0, at - injector.clock()))
                kind, channel = card.split("@")
                await injector.poison(kind, channel)

        await asyncio.gather(process_faults(), poison_records())

    async def _all_up(self, stack: Stack) -> None:
        for service in stack.services:
            if not service.alive():
                await asyncio.to_thread(stack.start, service.name)

    async def _drain(
        self, http: httpx.AsyncClient, driver: LoadDriver
    ) -> dict[str, dict[str, Any]]:
        """Until every accepted order is final (GET /orders/{id}), or the drain timeout."""
        seen: dict[str, dict[str, Any]] = {}
        waiting = {a.order_id for a in driver.accepted}
        limit = asyncio.Semaphore(16)

        async def look(order_id: str) -> None:
            async with limit:
                try:
                    response = await http.get(f"/orders/{order_id}")
                except httpx.TransportError:
                    return
            if response.status_code == 200:
                seen[order_id] = response.json()
                if seen[order_id]["final"]:
                    waiting.discard(order_id)

        deadline = time.monotonic() + DRAIN_TIMEOUT_S
        while waiting and time.monotonic() < deadline:
            await asyncio.gather(*(look(o) for o in list(waiting)))
            if waiting:
                await asyncio.sleep(1.0)
        return seen

    async def _drain_enrollments(self, http: httpx.AsyncClient, load: EnrollmentLoad) -> None:
        """Until every accepted enrollment is settled (GET /enrollments/{id}), or the drain
        timeout; a later drop or transfer still under way is waited for by the settle loop."""
        waiting = {a.enrollment_id for a in load.accepted}
        deadline = time.monotonic() + DRAIN_TIMEOUT_S
        while waiting and time.monotonic() < deadline:
            seen = await self._get_enrollments(http, load, waiting)
            waiting -= {i for i, body in seen.items() if body.get("settled")}
            if waiting:
                await asyncio.sleep(1.0)

    async def _get_enrollments(
        self, http: httpx.AsyncClient, load: EnrollmentLoad, only: set[str] | None = None
    ) -> dict[str, dict[str, Any]]:
        seen: dict[str, dict[str, Any]] = {}
        limit = asyncio.Semaphore(16)

        async def look(enrollment_id: str) -> None:
            async with limit:
                try:
                    response = await http.get(f"/enrollments/{enrollment_id}")
                except httpx.TransportError:
                    return
            if response.status_code == 200:
                seen[enrollment_id] = response.json()

        ids = {a.enrollment_id for a in load.accepted} if only is None else only
        await asyncio.gather(*(look(i) for i in ids))
        return seen

    async def _observe(
        self,
        stack: Stack,
        injector: Injector,
        driver: LoadDriver,
        http: httpx.AsyncClient,
        api_orders: dict[str, dict[str, Any]],
        db_url: str,
        loads: list[TrafficLoad],
    ) -> Observed:
        settings = stack.settings
        bootstrap = settings.kafka_bootstrap
        events_topic = settings.topic(EVENTS)
        skip = {(p.partition, p.offset) for p in injector.poisons if p.topic == events_topic}
        channels = running_channels(settings.cdc_enabled)
        command_topics = [settings.topic(c) for c in channels]
        changelogs = [changelog_topic(settings, c) for c in channels]
        # Settle: compensations follow a final status, the projector follows the topic,
        # poison written late in the load still has to reach an agent, and the worker's
        # group should commit up to the end of its topics.
        lettered_topic = settings.topic(DEAD_LETTERS)
        expected = {
            (p.topic, p.partition, p.offset) for p in injector.poisons if p.expect == "dead-letter"
        }
        deadline = time.monotonic() + SETTLE_TIMEOUT_S
        while True:
            ends = await end_offsets(bootstrap, events_topic)
            history = History.of(await read_topic(bootstrap, events_topic), skip)
            models = await asyncio.to_thread(_read_models, db_url, events_topic)
            dead = await read_topic(bootstrap, lettered_topic)
            # The worker's own stored positions, not its group's committed offsets (those are
            # only a hint it does not resume from).
            worker_lag = await position_lag(bootstrap, command_topics, changelogs)
            reserved = [
                k
                for k in history.entities("product")
                if history.stream(k)[-1].payload.get("reserved")
            ] + _held_seats_and_credits(history)
            caught_up = all(models.checkpoints.get(p, 0) >= e for p, e in ends.items())
            missing = expected - dead_letter_sources(dead)
            unsettled = [v for load in loads for v in load.violations(history)]
            if caught_up and not reserved and not missing and not worker_lag and not unsettled:
                break
            if time.monotonic() > deadline:
                break
            await asyncio.sleep(2.0)
        # The order of reads matters: topic ends first, then the tables (they may only be
        # ahead of the ends read above), then the topic up to those ends.
        api_stock: dict[str, dict[str, Any] | None] = {}
        for product in [f"sku-{i}" for i in range(PRODUCTS)]:
            response = await http.get(f"/products/{product}/stock")
            api_stock[product] = response.json() if response.status_code == 200 else None
        for order_id, body in list(api_orders.items()):
            if body.get("final"):
                continue
            response = await http.get(f"/orders/{order_id}")
            if response.status_code == 200:
                api_orders[order_id] = response.json()
        # Where each lost order's commands are: on the order-saga topic (so an agent skipped
        # them) or nowhere (so the 202 was not backed by Kafka).
        lost = [
            a.order_id
            for a in driver.accepted
            if not api_orders.get(a.order_id, {}).get("final") and not history.is_final(a.order_id)
        ]
        commands = await _commands_of(bootstrap, settings.topic(ORDER_SAGA), settings.app_id, lost)
        return Observed(
            attempts=driver.attempts,
            api_orders=api_orders,
            stock_start={p: STOCK_START for p in api_stock},
            api_stock=api_stock,
            history=history,
            event_ends=ends,
            dead_letters=dead,
            poisons=injector.poisons,
            read_models=models,
            worker_lag=worker_lag,
            commands=commands,
        )


async def _commands_of(
    bootstrap: str, topic: str, group: str, order_ids: list[str]
) -> dict[str, list[str]]:
    """Each order's records on the order-saga topic, a line each, with the worker group's
    committed offset of that partition."""
    if not order_ids:
        return {}
    wanted = set(order_ids)
    committed = await committed_offsets(bootstrap, group)
    found: dict[str, list[str]] = {o: [] for o in order_ids}
    for raw in await read_topic(bootstrap, topic):
        key = (raw.key or b"").decode(errors="replace")
        if key not in wanted:
            continue
        try:
            what = Envelope.decode(raw.value).type
        except ContractError as exc:
            what = f"undecodable ({exc})"
        done = committed.get((topic, raw.partition))
        verdict = (
            "committed past it: consumed, or skipped"
            if done is not None and done > raw.offset
            else "not committed past it: the partition stalled before it"
        )
        found[key].append(
            f"  on {topic}[{raw.partition}]@{raw.offset}: {what}; the worker group's committed "
            f"offset there is {done} ({verdict})"
        )
    for lines in found.values():
        if not lines:
            lines.append(f"  NOT on {topic}: the 202 was not backed by a record on Kafka")
    return found


def _read_models(db_url: str, events_topic: str) -> ReadModels:
    engine = create_read_engine(db_url)
    try:
        with engine.connect() as conn:
            orders = {
                r.order_id: r
                for r in (
                    codec.row_of(ORDERS, m._mapping)
                    for m in conn.execute(select(schema.table_of(ORDERS)))
                )
            }
            stock = {
                r.product_id: r
                for r in (
                    codec.row_of(PRODUCT_STOCK, m._mapping)
                    for m in conn.execute(select(schema.table_of(PRODUCT_STOCK)))
                )
            }
            timeline = {
                codec.timeline_row(m._mapping) for m in conn.execute(select(schema.saga_timeline))
            }
            checkpoints = queries.checkpoints(conn, events_topic)
            tables = {
                model.name: {
                    getattr(row, model.key): row
                    for row in (
                        codec.row_of(model, m._mapping)
                        for m in conn.execute(select(schema.table_of(model)))
                    )
                }
                for model in READ_MODELS
                if model not in (ORDERS, PRODUCT_STOCK)  # compared field by field above
            }
        return ReadModels(orders, stock, timeline, checkpoints, tables)
    finally:
        engine.dispose()


def _held_seats_and_credits(history: History) -> list[str]:
    """Courses and students whose last fact still holds seats or credits (a saga's
    compensation, or a promoted enrollment, still under way)."""
    held = []
    for key in history.entities("course") + history.entities("student"):
        last = history.stream(key)[-1].payload
        if last.get("held") or last.get("credits_held"):
            held.append(key)
    return held
