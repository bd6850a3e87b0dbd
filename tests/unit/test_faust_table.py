"""The worker's table writes: changelog first, acknowledged, then the local store, then the
persisted changelog offset, so the local store is never ahead of its changelog (the
integration twin, on the real broker and RocksDB, is tests/integration/test_table_recovery.py)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import faust
import pytest
from aiokafka.structs import RecordMetadata
from faust.stores.memory import Store as MemoryStore
from faust.streams import current_event
from faust.types import TP

from services.worker.faust_app import FaustTable
from services.worker.positions import position_key
from services.worker.runner import StateWrite

pytestmark = pytest.mark.unit
CHANGELOG = "app-inventory-state-changelog"


class Store(dict[bytes, bytes]):
    """Records every step in one journal, with the partition Faust's store would pick."""

    def __init__(self, journal: list[tuple[Any, ...]]) -> None:
        super().__init__()
        self.journal = journal

    def __setitem__(self, key: bytes, value: bytes) -> None:
        event = current_event()
        assert event is not None
        self.journal.append(("local", key, event.message.partition))
        super().__setitem__(key, value)

    def pop(self, key: bytes, default: Any = None) -> Any:
        event = current_event()
        assert event is not None
        self.journal.append(("deleted", key, event.message.partition))
        return super().pop(key, default)

    def set_persisted_offset(self, tp: TP, offset: int) -> None:
        self.journal.append(("persisted", tp, offset))


class Changelog:
    def __init__(self, journal: list[tuple[Any, ...]], fail: bool = False) -> None:
        self.journal, self.fail, self.offsets = journal, fail, {0: 40, 1: 7}

    async def send_to(self, topic: str, key: bytes, value: bytes, partition: int) -> Any:
        assert topic == CHANGELOG
        self.journal.append(("sent", key, partition))
        future: asyncio.Future[RecordMetadata] = asyncio.get_running_loop().create_future()
        if self.fail:
            future.set_exception(ConnectionError("broker went away"))
            return future
        offset = self.offsets[partition]
        self.offsets[partition] += 1

        def ack() -> None:
            self.journal.append(("acked", key))
            future.set_result(RecordMetadata(topic, partition, None, offset, -1, 0, -1))  # type: ignore[arg-type]

        asyncio.get_running_loop().call_soon(ack)
        return future


def faust_table(journal: list[tuple[Any, ...]]) -> Any:
    topic = SimpleNamespace(get_topic_name=lambda: CHANGELOG)
    return SimpleNamespace(changelog_topic=topic, data=Store(journal))


async def test_a_batch_reaches_the_changelog_before_the_local_store() -> None:
    journal: list[tuple[Any, ...]] = []
    table = FaustTable(faust_table(journal), Changelog(journal).send_to)
    states = [StateWrite("p1", b"s1", 0), StateWrite("p2", b"s2", 1)]
    await table.write(states, {("t.inventory", 0): 12})
    pos = position_key("t.inventory", 0).encode()
    assert journal == [
        ("sent", b"p1", 0),
        ("sent", b"p2", 1),
        ("sent", pos, 0),
        ("acked", b"p1"),
        ("acked", b"p2"),
        ("acked", pos),
        ("local", b"p1", 0),
        ("local", b"p2", 1),
        ("local", pos, 0),
        ("persisted", TP(CHANGELOG, 0), 41),  # the last offset the batch reached there
        ("persisted", TP(CHANGELOG, 1), 7),
    ]
    assert (table.load("p2", 1), table.load_position("t.inventory", 0)) == (b"s2", 12)


async def test_a_batch_the_changelog_refused_is_not_applied_locally() -> None:
    journal: list[tuple[Any, ...]] = []
    table = FaustTable(faust_table(journal), Changelog(journal, fail=True).send_to)
    with pytest.raises(ConnectionError):
        await table.write([StateWrite("p1", b"s1", 0)], {("t.inventory", 0): 3})
    assert [step[0] for step in journal] == ["sent", "sent"]
    assert (table.load("p1", 0), table.load_position("t.inventory", 0)) == (None, None)


async def test_a_memory_store_can_be_scanned_while_batches_write_to_it() -> None:
    """The deadline rebuild yields to batches between slices of its scan."""
    app = faust.App("scan-test", store="memory://")
    store = MemoryStore("memory://", app, SimpleNamespace(name="t"))
    for i in range(3):
        store[f"k{i}".encode()] = b"v"
    store[position_key("t.inventory", 0).encode()] = b"12"
    table = FaustTable(SimpleNamespace(data=store), Changelog([]).send_to)
    seen = []
    for key, _ in table.items():
        seen.append(key)
        store[f"new-{key}".encode()] = b"v"  # what a batch stores during a yield
    assert sorted(seen) == ["k0", "k1", "k2"]


async def test_a_deletion_is_a_tombstone_on_the_changelog_before_the_local_store() -> None:
    """A retired key's deletion (its chunks, then its marker) goes the way of every write:
    each tombstone sent and acknowledged, then deleted locally, then the offset persisted."""
    journal: list[tuple[Any, ...]] = []
    sent: list[tuple[bytes, bytes | None]] = []
    changelog = Changelog(journal)

    async def send_to(topic: str, key: bytes, value: bytes | None, partition: int) -> Any:
        sent.append((key, value))
        return await changelog.send_to(topic, key, value, partition)  # type: ignore[arg-type]

    table = FaustTable(faust_table(journal), send_to)
    await table.write([StateWrite("o1", b"marker", 0)], {})
    journal.clear()
    states = [StateWrite("o1\x1fseen/0", None, 0), StateWrite("o1", None, 0)]
    await table.write(states, {("t.order-saga", 0): 9})
    pos = position_key("t.order-saga", 0).encode()
    assert sent[1:] == [(b"o1\x1fseen/0", None), (b"o1", None), (pos, b"9")]
    assert journal == [
        ("sent", b"o1\x1fseen/0", 0),
        ("sent", b"o1", 0),
        ("sent", pos, 0),
        ("acked", b"o1\x1fseen/0"),
        ("acked", b"o1"),
        ("acked", pos),
        ("deleted", b"o1\x1fseen/0", 0),
        ("deleted", b"o1", 0),
        ("local", pos, 0),
        ("persisted", TP(CHANGELOG, 0), 43),
    ]
    assert table.load("o1", 0) is None
