"""The worker's table adapter beyond the table contract (tests/unit/test_table_contract.py,
which checks its writes against every store)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import faust
import pytest
from faust.stores.memory import Store as MemoryStore

from services.worker.faust_app import FaustTable
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
