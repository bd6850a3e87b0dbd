"""The worker's table adapter beyond the table contract (tests/unit/test_table_contract.py,
which checks its writes against every store)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import faust
import pytest
from faust.stores.memory import Store as MemoryStore
from faust.types import TP

from runtime.settings import Settings
from sagas.participants.ledger import CapacityLedger
from services.worker.faust_app import FaustTable, create_app
from services.worker.positions import position_key

pytestmark = pytest.mark.unit


async def _never_sent(topic: str, key: bytes, value: bytes | None, partition: int) -> Any:
    raise AssertionError("nothing is written here")


async def test_a_memory_store_can_be_scanned_while_batches_write_to_it() -> None:
    """The deadline rebuild yields to batches between slices of its scan."""
    app = faust.App("scan-test", store="memory://")
    named: Any = SimpleNamespace(name="t")  # all the store reads of its table
    store: Any = MemoryStore("memory://", app, named)
    for i in range(3):
        store[f"k{i}".encode()] = b"v"
    store[position_key("t.inventory", 0).encode()] = b"12"
    table = FaustTable(SimpleNamespace(data=store), _never_sent)
    seen = []
    for key, _ in table.items():
        seen.append(key)
        store[f"new-{key}".encode()] = b"v"  # what a batch stores during a yield
    assert sorted(seen) == ["k0", "k1", "k2"]


def test_the_deadline_index_reads_and_repairs_only_partitions_held_as_active(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A standby's store is Faust's to write, from the changelog: an index entry the
    rebuild wrote there went to another worker's changelog partition and moved the
    standby's persisted offset past the records in Faust's standby buffer. A partition
    taken away may keep its database open: it is another worker's too."""
    settings = Settings(data_dir=tmp_path, store="rocksdb", partitions=2, rocksdb_memory_mb=16)
    app, [runner] = create_app(settings, [CapacityLedger(name="inventory", entity_type="product")])
    faust_table: Any = runner.faust_table  # type: ignore[attr-defined]
    dbs = [faust_table.data._db_for_partition(p) for p in (0, 1)]  # both open, as Faust has them
    changelog = faust_table.changelog_topic.get_topic_name()
    source = faust_table.changelog_topic.get_topic_name().replace("-changelog", "")

    def assign(actives: set[TP], standbys: set[TP]) -> None:
        monkeypatch.setattr(app.assignor, "assigned_actives", lambda: actives)
        monkeypatch.setattr(app.assignor, "assigned_standbys", lambda: standbys)

    try:
        assign({TP(changelog, 0), TP(changelog, 1), TP(source, 0)}, set())
        assert runner.table.held_partitions() == [0, 1]
        assign({TP(changelog, 0), TP(source, 0)}, {TP(changelog, 1)})  # 1 held as a standby
        assert runner.table.held_partitions() == [0]
        assign({TP(changelog, 1)}, set())  # 0 taken away, its database still open
        assert runner.table.held_partitions() == [1]
        assign(set(), set())  # before an assignment, or after all was revoked
        assert runner.table.held_partitions() == []
    finally:
        for db in dbs:
            db.close()
