"""Two and three projector processes on one event topic and one PostgreSQL database, as real
processes in one consumer group: they split the partitions, and with one of them SIGKILLed
twice in the middle of a batch (its partitions then move to the others, and back when it
rejoins) the read models still equal the pure folds of the topic and a clean run's tables.
Plus the fence on PostgreSQL itself: of two transactions from one stored offset, the second
waits on the offset row and is refused once the first commits (services/projector/SCALING.md).
"""

from __future__ import annotations

import asyncio
import re
import signal
import threading
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from sqlalchemy import Engine, text

from readside import queries, store
from readside.batch import apply_batch
from runtime.settings import Settings
from runtime.topics import EVENTS, create_topics
from sagas.messages import Envelope
from sagas.projections.orders import ORDERS
from sagas.projections.stock import PRODUCT_STOCK
from tests.integration.golden import expected_rows, golden_events, scrambled
from tests.integration.harness import broker_reachable, isolated_settings
from tests.integration.readside import (
    ProjectorProcess,
    applied_offsets,
    fresh_database,
    produce,
    read_engine,
    snapshot,
    wait_until_applied,
)
from tests.unit.test_projector_fencing import NOW, TOPIC, _batch, _log

pytestmark = pytest.mark.integration

PARTITIONS = 6
BATCH = 10
DELAY_MS = 80  # every process sleeps this long inside each batch's open transaction
ASSIGNED = re.compile(r"projecting partitions \[([\d, ]*)\]")
RELEASED = re.compile(r"released partitions \[([\d, ]*)\]")


@dataclass(frozen=True)
class Log:
    settings: Settings
    golden: list[Envelope]
    ends: dict[int, int]
    tmp: Path
    clean: dict[str, list[tuple[Any, ...]]]
    """Every table after one projector process applied the whole log undisturbed."""


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def log(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Log]:
    assert broker_reachable(), "no Kafka broker: start it with `deploy/local/kafka.sh start`"
    tmp = tmp_path_factory.mktemp("projector-scaleout")
    settings = isolated_settings(
        tmp, partitions=PARTITIONS, projector_batch_size=BATCH, projector_metrics_port=0
    )
    await create_topics(settings)
    golden = golden_events(orders=500, products=12, customers=50)
    records: list[Envelope | tuple[bytes, bytes]] = [*scrambled(golden, seed=31, duplicates=0.15)]
    records.insert(len(records) // 3, (b"order:o007", b"{not json"))
    ends = await produce(settings, records)
    with fresh_database("postgresql", tmp) as url, read_engine(url) as engine:
        clean = _process(settings, url, "clean", tmp, delay_ms=0)
        clean.start()
        try:
            await wait_until_applied(engine, settings.topic(EVENTS), ends, timeout=120)
        finally:
            clean.stop()
        yield Log(settings, golden, ends, tmp, snapshot(engine))


def _process(
    settings: Settings, url: str, group: str, tmp: Path, delay_ms: int = DELAY_MS, n: int = 0
) -> ProjectorProcess:
    """A projector process of ``group`` (its own log directory: they share an app id)."""
    values = {
        "database_url": url,
        "app_id": f"{settings.app_id}-{group}",
        "projector_commit_delay_ms": delay_ms,
    }
    log_dir = tmp / f"{group}-{n}"
    log_dir.mkdir(exist_ok=True)
    return ProjectorProcess(settings.model_copy(update=values), log_dir)


def _owned(process: ProjectorProcess) -> set[int]:
    """The partitions the process applies now, from its log of this start."""
    owned: set[int] = set()
    for line in process.log.read_text(errors="replace").splitlines():
        if found := ASSIGNED.search(line):
            owned |= {int(p) for p in found.group(1).split(",") if p.strip()}
        elif found := RELEASED.search(line):
            owned -= {int(p) for p in found.group(1).split(",") if p.strip()}
    return owned


def _ever_owned(process: ProjectorProcess) -> set[int]:
    owned: set[int] = set()
    for path in process.log_dir.glob("*.log"):
        for found in ASSIGNED.finditer(path.read_text(errors="replace")):
            owned |= {int(p) for p in found.group(1).split(",") if p.strip()}
    return owned


async def _kill_inside_a_batch(
    victim: ProjectorProcess, engine: Engine, log: Log, attempts: int = 6
) -> int:
    """Once the victim owns partitions with records left, SIGKILL it right after one of its
    commits, while its next batch sleeps inside its open transaction; start it again. Returns
    the offsets of its partitions applied at the kill. An attempt whose kill landed after a
    commit (a busy machine can delay this process past the whole pause) is retried."""
    topic = log.settings.topic(EVENTS)
    for _ in range(attempts):
        deadline = time.monotonic() + 90
        while True:
            if not victim.alive():
                raise AssertionError(f"the victim exited:\n{victim.tail_log()}")
            if time.monotonic() > deadline:
                raise AssertionError(f"the victim never got work:\n{victim.tail_log()}")
            applied = await asyncio.to_thread(applied_offsets, engine, topic)
            mine = {p for p in _owned(victim) if applied.get(p, 0) < log.ends.get(p, 0) - BATCH}
            if mine:
                break
            await asyncio.sleep(0.05)
        before = sum(applied.get(p, 0) for p in mine)
        while True:  # the victim's next commit on them (nobody else applies them now)
            applied = await asyncio.to_thread(applied_offsets, engine, topic)
            now = sum(applied.get(p, 0) for p in mine)
            if now != before or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.005)
        await asyncio.sleep(DELAY_MS / 3000)
        victim.kill()
        after = await asyncio.to_thread(applied_offsets, engine, topic)
        victim.start()
        if now != before and sum(after.get(p, 0) for p in mine) == now:
            return now
    raise AssertionError(f"no kill landed inside a batch in {attempts} attempts")


@pytest.mark.asyncio(loop_scope="module")
@pytest.mark.parametrize("processes", [2, 3])
async def test_projector_processes_split_the_topic_and_a_sigkilled_one_loses_and_doubles_nothing(
    log: Log, processes: int
) -> None:
    topic = log.settings.topic(EVENTS)
    with fresh_database("postgresql", log.tmp) as url, read_engine(url) as engine:
        group = f"group{processes}"
        running = [_process(log.settings, url, group, log.tmp, n=n) for n in range(processes)]
        victim = running[0]
        try:
            for process in running:
                process.start()
            await _kill_inside_a_batch(victim, engine, log)
            await _kill_inside_a_batch(victim, engine, log)
            await wait_until_applied(engine, topic, log.ends, timeout=180)
        except AssertionError as exc:
            tails = "\n".join(f"--- {p.log}\n{p.tail_log(1500)}" for p in running)
            raise AssertionError(f"{exc}\n{tails}") from exc
        finally:
            for process in running:
                process.stop()
        assert victim.starts >= 3  # two kills inside a batch, each restarted
        for process in running:  # every process applied a share of the topic
            assert _ever_owned(process), f"{process.log} never got a partition"
        assert snapshot(engine) == log.clean  # every table, counters and receipts included
        expected = expected_rows(log.golden)
        with engine.connect() as conn:
            orders = store.load_rows(conn, ORDERS, list(expected.orders))
            stock = store.load_rows(conn, PRODUCT_STOCK, list(expected.stock))
            positions = store.load_positions(conn, list(expected.positions))
            counters = queries.counters(conn)
            held = queries.held_events(conn)
        assert orders == expected.orders and stock == expected.stock
        assert positions == expected.positions and held.count == 0
        assert counters["applied"] == len(log.golden)  # no batch counted twice or lost
        assert counters["dead_lettered"] == 1


def _in_a_batch(engine: Engine) -> int:
    """Connections to this database inside an open batch, doing nothing: a transaction that
    wrote its offsets (a batch asleep before its commit, or a process stopped there), not one
    of the short reads between batches."""
    query = text(
        "SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid "
        "WHERE a.datname = current_database() AND a.state = 'idle in transaction' "
        "AND l.relation = 'projection_checkpoints'::regclass AND l.mode = 'RowExclusiveLock'"
    )
    with engine.connect() as conn:
        return int(conn.execute(query).scalar_one())


async def _stop_inside_a_batch(
    process: ProjectorProcess, engine: Engine, log: Log, attempts: int = 20
) -> set[int]:
    """SIGSTOP the process while its batch sleeps inside its open transaction (its rows and
    offsets written, locked, not committed); returns the partitions it owned."""
    assert process.proc is not None
    topic = log.settings.topic(EVENTS)
    for _ in range(attempts):
        deadline = time.monotonic() + 60
        while True:
            applied = await asyncio.to_thread(applied_offsets, engine, topic)
            mine = {p for p in _owned(process) if applied.get(p, 0) < log.ends.get(p, 0) - BATCH}
            if mine or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.05)
        assert mine, f"the process never got work:\n{process.tail_log()}"
        process.proc.send_signal(signal.SIGSTOP)
        if await asyncio.to_thread(_in_a_batch, engine):
            return mine
        process.proc.send_signal(signal.SIGCONT)
        await asyncio.sleep(DELAY_MS / 3000)
    raise AssertionError(f"never stopped inside a batch in {attempts} attempts")


def _waiting_on_a_lock(engine: Engine) -> int:
    query = text(
        "SELECT count(*) FROM pg_stat_activity "
        "WHERE datname = current_database() AND wait_event_type = 'Lock'"
    )
    with engine.connect() as conn:
        return int(conn.execute(query).scalar_one())


@pytest.mark.asyncio(loop_scope="module")
async def test_a_process_paused_mid_batch_past_its_session_cannot_commit_over_the_next_owner(
    log: Log,
) -> None:
    """The case the revocation cannot wait for: A is frozen inside a batch (rows and offsets
    written, not committed) until the group expels it; B takes A's partitions, reads their
    offsets (A's batch not in them) and applies the same records, waiting on A's locks. A,
    resumed, commits first; B's batch is refused whole (the fence), B reads the offsets again
    and goes on; the tables equal a clean run's."""
    topic = log.settings.topic(EVENTS)
    settings = log.settings.model_copy(update={"projector_batch_size": 500})
    with fresh_database("postgresql", log.tmp) as url, read_engine(url) as engine:
        a, b = (_process(settings, url, "paused", log.tmp, n=n) for n in range(2))
        try:
            a.start()
            frozen = await _stop_inside_a_batch(a, engine, log)
            b.start()
            deadline = time.monotonic() + 60
            while not await asyncio.to_thread(_waiting_on_a_lock, engine):
                # A's session expires, B seeks A's partitions and reaches A's locked rows
                assert time.monotonic() < deadline, f"B never waited on A:\n{b.tail_log()}"
                await asyncio.sleep(0.1)
            assert frozen <= _owned(b)
            assert a.proc is not None
            a.proc.send_signal(signal.SIGCONT)
            await wait_until_applied(engine, topic, log.ends, timeout=180)
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n--- A\n{a.tail_log()}\n--- B\n{b.tail_log()}") from exc
        finally:
            if a.proc is not None and a.alive():
                a.proc.send_signal(signal.SIGCONT)
            a.stop()
            b.stop()
        assert "batch rolled back" in b.log.read_text(errors="replace"), b.tail_log()
        assert snapshot(engine) == log.clean


def _run(work: Any) -> tuple[threading.Thread, list[BaseException]]:
    raised: list[BaseException] = []

    def target() -> None:
        try:
            work()
        except BaseException as exc:
            raised.append(exc)

    thread = threading.Thread(target=target)
    thread.start()
    return thread, raised


@pytest.mark.parametrize("first_commits", [True, False])
def test_on_postgresql_a_batch_from_a_taken_offset_waits_then_is_refused(
    tmp_path: Path, first_commits: bool
) -> None:
    """Process A's batch is open (its owner paused or expelled); process B, the partition's
    new owner, applies the same offsets. B waits on A's locks; if A commits, B is refused
    whole; if A dies (rolls back), B commits."""
    events = _log(golden_events(orders=20, products=2))
    with fresh_database("postgresql", tmp_path) as url, read_engine(url) as engine:
        with engine.begin() as conn:
            apply_batch(conn, _batch(events, {0: (0, 10)}, p0=None), NOW)
        stale = engine.connect()
        transaction = stale.begin()
        apply_batch(stale, _batch(events, {0: (10, 18)}, p0=10), NOW)

        def new_owner() -> None:
            with engine.begin() as conn:
                apply_batch(conn, _batch(events, {0: (10, 25)}, p0=10), NOW)

        thread, raised = _run(new_owner)
        time.sleep(1.0)
        assert thread.is_alive()  # waiting on the stale batch's row locks
        if first_commits:
            transaction.commit()
        else:
            transaction.rollback()
        stale.close()
        thread.join(30)
        with engine.connect() as conn:
            stored = store.load_checkpoints(conn, TOPIC)
        if first_commits:
            assert len(raised) == 1 and isinstance(raised[0], store.Fenced)
            assert stored == {0: 18}
        else:
            assert raised == [] and stored == {0: 25}
