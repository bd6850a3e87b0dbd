"""SAGALINE_TABLE_STANDBY_REPLICAS reaches Faust, and what the README's capacity section says
it costs holds for Faust's assignor: nothing with one worker, one copy of every partition
on another worker with several."""

from __future__ import annotations

from pathlib import Path

import pytest
from faust.assignor.client_assignment import CopartitionedAssignment
from faust.assignor.copartitioned_assignor import CopartitionedAssignor

from runtime.settings import Settings
from services.worker.faust_app import create_app

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("standbys", [0, 2])
def test_the_setting_is_fausts_table_standby_replicas(standbys: int, tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path, store="memory", table_standby_replicas=standbys)
    app, _ = create_app(settings, [])
    assert app.conf.table_standby_replicas == standbys


def test_the_default_is_one_standby() -> None:
    assert Settings().table_standby_replicas == 1


def assign(workers: int, partitions: int, standbys: int) -> list[CopartitionedAssignment]:
    members = {f"w{i}": CopartitionedAssignment(topics={"t"}) for i in range(workers)}
    assignor = CopartitionedAssignor(
        topics=["t"], cluster_asgn=members, num_partitions=partitions, replicas=standbys
    )
    return list(assignor.get_assignment().values())


def test_one_worker_holds_no_standby() -> None:
    (alone,) = assign(workers=1, partitions=8, standbys=1)
    assert (alone.actives, alone.standbys) == (set(range(8)), set())


def test_with_three_workers_every_partition_has_one_standby_elsewhere() -> None:
    workers = assign(workers=3, partitions=8, standbys=1)
    standbys = [p for w in workers for p in w.standbys]
    assert sorted(standbys) == list(range(8))
    assert all(not (w.actives & w.standbys) for w in workers)
