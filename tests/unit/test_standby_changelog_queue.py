"""A standby's changelog records survive Faust's resumes of flow (faust_seam): Faust empties
its changelog queue on every ``flow_control.resume()``, and its recovery resumes flow after
the standby partitions have started fetching, so their first fetch was thrown away while the
consumer's position moved past it (RELIABILITY.md, "A worker lost among three")."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import faust
import pytest
from faust.types import TP

from runtime.settings import Settings
from services.worker.faust_app import create_app

pytestmark = pytest.mark.unit

STANDBY = TP("sagaline-order-saga-changelog", 1)
ACTIVE = TP("sagaline-order-saga-changelog", 0)
GONE = TP("sagaline-order-saga-changelog", 2)


def event(tp: TP, offset: int) -> Any:
    return SimpleNamespace(message=SimpleNamespace(tp=tp, offset=offset))


def tables(app: faust.App) -> Any:
    """Faust's TableManager, whose interface lacks the changelog queue and the recovery."""
    return app.tables


def queued(app: faust.App) -> list[tuple[TP, int]]:
    return [(e.message.tp, e.message.offset) for e in tables(app).changelog_queue._queue]


@pytest.fixture
def app(tmp_path: Path) -> faust.App:
    app, _ = create_app(Settings(data_dir=tmp_path, store="memory"), [])
    return app


def fill(app: faust.App, records: list[tuple[TP, int]]) -> None:
    for tp, offset in records:
        tables(app).changelog_queue.put_nowait(event(tp, offset))


def test_a_resume_keeps_what_a_standby_has_not_applied_in_order(app: faust.App) -> None:
    recovery = tables(app).recovery
    recovery.standby_tps = {STANDBY}
    recovery.active_tps = {ACTIVE}
    recovery.standby_offsets[STANDBY] = 11  # applied up to 11 (its persisted offset)
    fill(app, [(STANDBY, o) for o in range(8, 16)] + [(ACTIVE, 5), (GONE, 7), (STANDBY, 16)])

    app.flow_control.resume()  # what on_recovery_completed does once the standby fetched

    assert queued(app) == [(STANDBY, o) for o in range(12, 17)]


def test_a_standby_with_nothing_applied_yet_keeps_its_whole_first_fetch(app: faust.App) -> None:
    recovery = tables(app).recovery
    recovery.standby_tps = {STANDBY}
    fill(app, [(STANDBY, o) for o in range(0, 300)])

    app.flow_control.resume()

    assert queued(app) == [(STANDBY, o) for o in range(0, 300)]


def test_records_of_actives_and_of_partitions_no_longer_held_are_dropped_as_faust_does(
    app: faust.App,
) -> None:
    tables(app).recovery.active_tps = {ACTIVE}
    fill(app, [(ACTIVE, 1), (GONE, 2), (STANDBY, 3)])  # STANDBY is not one here

    app.flow_control.resume()

    assert queued(app) == []


def test_before_the_first_rebalance_a_resume_empties_the_queue(app: faust.App) -> None:
    assert tables(app)._recovery is None
    fill(app, [(STANDBY, 1)])

    app.flow_control.resume()

    assert queued(app) == []


async def test_records_kept_across_a_revocation_of_a_partition_taken_away_never_reach_recovery(
    app: faust.App,
) -> None:
    """Soak soakfd6711: the revocation's clear kept a standby's records (the new assignment
    unknown yet), the assignment then took the partition away, and Faust's recovery loop
    applied them to another table's store of the same partition number."""
    recovery = tables(app).recovery
    recovery.standby_tps = {STANDBY}
    recovery.active_tps = {ACTIVE}
    fill(app, [(STANDBY, 3), (STANDBY, 4)])
    app.flow_control.clear()  # the revocation's: STANDBY is still a standby here
    assert queued(app) == [(STANDBY, 3), (STANDBY, 4)]

    recovery.standby_tps = set()  # Recovery.on_rebalance: the new assignment lacks it
    fill(app, [(ACTIVE, 9)])

    got = await tables(app).changelog_queue.get()

    assert (got.message.tp, got.message.offset) == (ACTIVE, 9)
    assert queued(app) == []


async def test_records_of_partitions_still_held_reach_recovery_in_order(app: faust.App) -> None:
    recovery = tables(app).recovery
    recovery.standby_tps = {STANDBY}
    recovery.active_tps = {ACTIVE}
    fill(app, [(STANDBY, 3), (GONE, 1), (ACTIVE, 9)])
    queue = tables(app).changelog_queue

    got = [await queue.get(), await queue.get()]

    assert [(e.message.tp, e.message.offset) for e in got] == [(STANDBY, 3), (ACTIVE, 9)]
