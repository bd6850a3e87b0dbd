"""The table contract, one class run against every store the worker's table adapter
(services/worker/faust_table.py) writes to: the unit tests' in-memory store, Faust's memory
store and Faust's RocksDB store (the worker's, inside its memory budget).

A batch reaches the changelog and is acknowledged before the local store is written, then
the changelog offset it reached is persisted, so the local store is never ahead of its
changelog; a deleted key is gone from the store and a tombstone went to the changelog; the
persisted offset and the positions are kept where the store outlives its process. The
integration twin, SIGKILLs on the real broker, is tests/integration/test_table_recovery.py.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from aiokafka.structs import RecordMetadata
from faust.streams import current_event
from faust.types import TP

from runtime.settings import Settings
from sagas.participants.ledger import CapacityLedger
from services.worker.faust_app import create_app
from services.worker.faust_seam import open_partition_dbs
from services.worker.faust_table import FaustTable
from services.worker.positions import position_key
from services.worker.runner import StateWrite

pytestmark = pytest.mark.unit
CHANGELOG = "app-inventory-state-changelog"
POSITION = position_key("t.inventory", 0).encode()


class UnitTestStore(dict[bytes, bytes]):
    """The in-memory store of the unit tests: a dict that, as Faust's stores do, needs the
    current event to say which partition a key is written in, and keeps the offset."""

    def __init__(self) -> None:
        super().__init__()
        self.offsets: dict[TP, int] = {}

    def __setitem__(self, key: bytes, value: bytes) -> None:
        assert current_event() is not None, "written outside a partition"
        super().__setitem__(key, value)

    def pop(self, key: bytes, default: Any = None) -> Any:
        assert current_event() is not None, "deleted outside a partition"
        return super().pop(key, default)

    def set_persisted_offset(self, tp: TP, offset: int) -> None:
        self.offsets[tp] = offset

    def persisted_offset(self, tp: TP) -> int | None:
        return self.offsets.get(tp)


@dataclass
class Backend:
    store: Any
    reopen: Callable[[], Any] | None
    """A new store over what this one leaves when its process ends (None: nothing)."""
    keeps_offsets: bool = True
    """False for Faust's memory store: it recovers its whole changelog at every start, so it
    keeps no offset (the positions, in the table itself, are what the worker resumes from)."""


def _worker_store(settings: Settings) -> Any:
    """The store ``create_app`` gives a process's table, as the worker opens it."""
    _, [runner] = create_app(settings, [CapacityLedger(name="inventory", entity_type="product")])
    return runner.faust_table.data  # type: ignore[attr-defined]


def _close(store: Any) -> None:
    for db in open_partition_dbs(store).values():
        db.close()


@pytest.fixture(params=["the unit tests' store", "Faust's memory store", "Faust's RocksDB store"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    if request.param == "the unit tests' store":
        yield Backend(UnitTestStore(), reopen=None)
        return
    if request.param == "Faust's memory store":
        memory = _worker_store(Settings(data_dir=tmp_path, store="memory"))
        yield Backend(memory, reopen=None, keeps_offsets=False)
        return
    settings = Settings(data_dir=tmp_path, store="rocksdb", partitions=2, rocksdb_memory_mb=16)
    opened = [_worker_store(settings)]

    def reopen() -> Any:
        _close(opened[-1])
        opened.append(_worker_store(settings))
        return opened[-1]

    yield Backend(opened[0], reopen)
    _close(opened[-1])


class Changelog:
    """Acknowledges each record a loop turn after it is sent (or refuses them all), and
    notes what the local store held for the key at that moment."""

    def __init__(self, journal: list[tuple[Any, ...]], local: Callable[[bytes, int], Any]) -> None:
        self.journal, self.local = journal, local
        self.fail, self.offsets = False, {0: 40, 1: 7}

    async def send_to(self, topic: str, key: bytes, value: bytes | None, partition: int) -> Any:
        assert topic == CHANGELOG
        self.journal.append(("sent", key, value, partition))
        future: asyncio.Future[RecordMetadata] = asyncio.get_running_loop().create_future()
        if self.fail:
            future.set_exception(ConnectionError("broker went away"))
            return future
        offset = self.offsets[partition]
        self.offsets[partition] += 1

        def ack() -> None:
            self.journal.append(("acked", key, "held locally:", self.local(key, partition)))
            future.set_result(RecordMetadata(topic, partition, None, offset, -1, 0, -1))

        asyncio.get_running_loop().call_soon(ack)
        return future


class TestTableContract:
    @pytest.fixture(autouse=True)
    def _table(self, backend: Backend) -> None:
        self.backend = backend
        self.journal: list[tuple[Any, ...]] = []
        self.changelog = Changelog(self.journal, self.local)
        self.table = self.adapter(backend.store)

    def adapter(self, store: Any) -> FaustTable:
        """The worker's adapter over ``store``, its offset persisting noted in the journal
        with what the local store held for the batch's keys at that moment."""
        persist = store.set_persisted_offset

        def set_persisted_offset(tp: TP, offset: int) -> None:
            self.journal.append(("persisted", tp, offset, "keys held:", self.batch_held()))
            persist(tp, offset)

        store.set_persisted_offset = set_persisted_offset
        topic = SimpleNamespace(get_topic_name=lambda: CHANGELOG)
        self.batch: list[StateWrite] = []
        return FaustTable(
            SimpleNamespace(changelog_topic=topic, data=store), self.changelog.send_to
        )

    def local(self, key: bytes, partition: int) -> bytes | None:
        return self.table.load(key.decode(), partition)

    def batch_held(self) -> bool:
        return all(self.table.load(s.key, s.partition) == s.value for s in self.batch)

    async def write(self, states: list[StateWrite], positions: dict[tuple[str, int], int]) -> None:
        self.batch = states
        await self.table.write(states, positions)

    async def test_a_batch_reaches_the_changelog_acknowledged_before_the_local_store(self) -> None:
        states = [StateWrite("p1", b"s1", 0), StateWrite("p2", b"s2", 1)]
        await self.write(states, {("t.inventory", 0): 12})
        assert self.journal == [
            ("sent", b"p1", b"s1", 0),
            ("sent", b"p2", b"s2", 1),
            ("sent", POSITION, b"12", 0),
            ("acked", b"p1", "held locally:", None),
            ("acked", b"p2", "held locally:", None),
            ("acked", POSITION, "held locally:", None),
            # the last offset the batch reached in each partition, once its keys are stored
            ("persisted", TP(CHANGELOG, 0), 41, "keys held:", True),
            ("persisted", TP(CHANGELOG, 1), 7, "keys held:", True),
        ]
        assert (self.table.load("p2", 1), self.table.load_position("t.inventory", 0)) == (b"s2", 12)

    async def test_a_batch_the_changelog_refused_is_not_applied_locally(self) -> None:
        self.changelog.fail = True
        with pytest.raises(ConnectionError):
            await self.write([StateWrite("p1", b"s1", 0)], {("t.inventory", 0): 3})
        assert [step[0] for step in self.journal] == ["sent", "sent"]
        assert (self.table.load("p1", 0), self.table.load_position("t.inventory", 0)) == (
            None,
            None,
        )

    async def test_a_deleted_key_is_a_tombstone_on_the_changelog_then_gone_from_the_store(
        self,
    ) -> None:
        """A retired key's deletion (its chunks, then its marker) goes the way of every write:
        each tombstone sent and acknowledged, then deleted locally, then the offset persisted."""
        await self.write([StateWrite("o1\x1fseen/0", b"chunk", 0), StateWrite("o1", b"m", 0)], {})
        self.journal.clear()
        states = [StateWrite("o1\x1fseen/0", None, 0), StateWrite("o1", None, 0)]
        await self.write(states, {("t.order-saga", 0): 9})
        pos = position_key("t.order-saga", 0).encode()
        assert self.journal == [
            ("sent", b"o1\x1fseen/0", None, 0),
            ("sent", b"o1", None, 0),
            ("sent", pos, b"9", 0),
            ("acked", b"o1\x1fseen/0", "held locally:", b"chunk"),
            ("acked", b"o1", "held locally:", b"m"),
            ("acked", pos, "held locally:", None),
            ("persisted", TP(CHANGELOG, 0), 44, "keys held:", True),
        ]
        assert (self.table.load("o1", 0), self.table.load("o1\x1fseen/0", 0)) == (None, None)

    async def test_the_persisted_offset_and_the_positions_are_kept(self) -> None:
        states = [StateWrite("p1", b"s1", 0), StateWrite("p2", b"s2", 1)]
        await self.write(states, {("t.inventory", 0): 12, ("t.inventory", 1): 5})
        await self.write([StateWrite("p1", b"s1'", 0)], {("t.inventory", 0): 13})
        # A memory store keeps them for its process's life (Faust recovers it whole at the
        # next start); a RocksDB store past it, read by a new store over its files.
        reopen = self.backend.reopen
        store = self.backend.store if reopen is None else reopen()
        table = self.table if reopen is None else self.adapter(store)
        offsets = [43, 8] if self.backend.keeps_offsets else [None, None]
        assert [store.persisted_offset(TP(CHANGELOG, p)) for p in (0, 1)] == offsets
        assert [table.load_position("t.inventory", p) for p in (0, 1)] == [13, 5]
        assert (table.load("p1", 0), table.load("p2", 1)) == (b"s1'", b"s2")
