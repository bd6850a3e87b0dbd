"""The fence between projector processes (services/projector/SCALING.md): a batch commits only
where its partitions' stored offsets still stand at the offsets it was read from; a stale
batch (read before another process moved the partition on) is refused whole, leaving every
table as it was. And the process's side of the handover: records fetched before a seek, or
of a released partition, are never applied.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from aiokafka import TopicPartition
from sqlalchemy import Engine

from readside import store
from readside.batch import Batch, apply_batch
from readside.triage import Positioned
from sagas.messages import Envelope
from services.projector.handover import Owned, group_id
from services.projector.isolation import refused
from tests.integration.golden import golden_events
from tests.integration.readside import fresh_database, read_engine, snapshot

pytestmark = pytest.mark.unit

TOPIC = "t.events"
NOW = datetime(2024, 1, 2, tzinfo=UTC)


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[Engine]:
    with fresh_database("sqlite", tmp_path) as url, read_engine(url) as engine:
        yield engine


def _log(events: Sequence[Envelope], partitions: int = 2) -> dict[int, list[Positioned]]:
    """The events as a producer keyed by entity would lay them out: partition -> records."""
    log: dict[int, list[Positioned]] = {p: [] for p in range(partitions)}
    for event in events:
        p = zlib.crc32(event.key.encode()) % partitions
        log[p].append(Positioned(event, p, len(log[p])))
    return log


def _batch(
    log: dict[int, list[Positioned]], spans: dict[int, tuple[int, int]], **starts: int | None
) -> Batch:
    """The records [start, end) of each partition, read from the stored offsets ``starts``
    (``p0=None``: partition 0 had no row)."""
    events = [r for p, (a, b) in spans.items() for r in log[p][a:b]]
    started = {int(k[1:]): v for k, v in starts.items()}
    return Batch(TOPIC, events, {p: b for p, (_, b) in spans.items()}, started_from=started)


def _commit(engine: Engine, batch: Batch) -> None:
    with engine.begin() as conn:
        apply_batch(conn, batch, NOW)


@pytest.fixture
def log() -> dict[int, list[Positioned]]:
    return _log(golden_events(orders=12, products=2))


def test_batches_that_chain_from_the_stored_offsets_commit(
    engine: Engine, log: dict[int, list[Positioned]]
) -> None:
    _commit(engine, _batch(log, {0: (0, 10), 1: (0, 7)}, p0=None, p1=None))
    _commit(engine, _batch(log, {0: (10, 20)}, p0=10))
    _commit(engine, _batch(log, {0: (20, len(log[0])), 1: (7, len(log[1]))}, p0=20, p1=7))
    with engine.connect() as conn:
        assert store.load_checkpoints(conn, TOPIC) == {p: len(rs) for p, rs in log.items()}


def test_a_stale_batch_is_refused_and_leaves_every_table_as_it_was(
    engine: Engine, log: dict[int, list[Positioned]]
) -> None:
    # Process A read partition 0 from offset 10; meanwhile process B took the partition over,
    # read it from 10 too and committed first.
    _commit(engine, _batch(log, {0: (0, 10)}, p0=None))
    _commit(engine, _batch(log, {0: (10, 25)}, p0=10))
    before = snapshot(engine)
    stale = _batch(log, {0: (10, 18)}, p0=10)
    with pytest.raises(store.Fenced) as refusal, engine.begin() as conn:
        apply_batch(conn, stale, NOW)
    assert refusal.value.moved == {0: 10}
    assert snapshot(engine) == before  # rows, positions, held events, receipts, counters


def test_a_stale_first_batch_is_refused_when_another_process_wrote_the_first_row(
    engine: Engine, log: dict[int, list[Positioned]]
) -> None:
    _commit(engine, _batch(log, {1: (0, 5)}, p1=None))
    before = snapshot(engine)
    with pytest.raises(store.Fenced), engine.begin() as conn:
        apply_batch(conn, _batch(log, {1: (0, 9)}, p1=None), NOW)
    assert snapshot(engine) == before


def test_one_moved_partition_refuses_the_whole_batch(
    engine: Engine, log: dict[int, list[Positioned]]
) -> None:
    _commit(engine, _batch(log, {0: (0, 5), 1: (0, 5)}, p0=None, p1=None))
    _commit(engine, _batch(log, {1: (5, 8)}, p1=5))
    before = snapshot(engine)
    with pytest.raises(store.Fenced) as refusal, engine.begin() as conn:
        apply_batch(conn, _batch(log, {0: (5, 12), 1: (5, 12)}, p0=5, p1=5), NOW)
    assert refusal.value.moved == {1: 5}
    assert snapshot(engine) == before  # partition 0's rows and offset did not move either


def test_a_refused_batch_blames_no_event_in_the_isolation_search(
    engine: Engine, log: dict[int, list[Positioned]]
) -> None:
    _commit(engine, _batch(log, {0: (0, 10)}, p0=None))
    with pytest.raises(store.Fenced):  # not one "refused" event per record of the batch
        refused(engine, _batch(log, {0: (0, 10)}, p0=None))


def test_the_rebuilds_catch_up_writes_its_offsets_unfenced(
    engine: Engine, log: dict[int, list[Positioned]]
) -> None:
    _commit(engine, _batch(log, {0: (0, 10)}, p0=None))
    plain = Batch(TOPIC, log[0][10:14], {0: 14})  # started_from None: as the swap applies it
    _commit(engine, plain)
    with engine.connect() as conn:
        assert store.load_checkpoints(conn, TOPIC) == {0: 14}


def _records(tp: TopicPartition, *offsets: int) -> list[Any]:
    return [SimpleNamespace(topic=tp.topic, partition=tp.partition, offset=o) for o in offsets]


def test_records_fetched_before_a_seek_or_for_a_released_partition_are_dropped() -> None:
    p0, p1, p2 = (TopicPartition(TOPIC, p) for p in range(3))
    owned = Owned()
    owned.sought(0, 100)
    owned.sought(1, None)
    owned.sought(2, 7)
    seen = owned.seeks  # a fetch returns here
    owned.sought(0, 140)  # partition 0 was sought again after the fetch returned
    owned.release([2])  # partition 2 was revoked
    fetched = {p0: _records(p0, 100, 101), p1: _records(p1, 0, 1), p2: _records(p2, 7)}
    assert list(owned.current(fetched, seen)) == [p1]
    assert list(owned.current(fetched, owned.seeks)) == [p0, p1]


def test_a_commit_moves_only_the_starts_nobody_sought_again_meanwhile() -> None:
    owned = Owned()
    owned.sought(0, 10)
    owned.sought(1, 20)
    epochs = dict(owned.sought_at)  # a batch of both partitions begins
    owned.sought(1, 20)  # partition 1 re-assigned (and sought) while the batch ran
    owned.advanced({0: 15, 1: 26}, epochs)
    assert owned.starts == {0: 15, 1: 20}  # the fence decides partition 1's next batch
    owned.to_seek([0])
    owned.advanced({0: 30}, {0: owned.sought_at[0]})
    assert 0 not in owned.starts and owned.unsought == {0}


def test_the_group_is_named_by_the_setting_or_after_the_app() -> None:
    assert group_id(SimpleNamespace(projector_group_id="", app_id="shop")) == "shop-projector"  # type: ignore[arg-type]
    assert group_id(SimpleNamespace(projector_group_id="db2", app_id="shop")) == "db2"  # type: ignore[arg-type]
