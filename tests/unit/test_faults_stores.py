"""The fault harness's store check reads every recovered record: a retired key's marker
is a state (it decodes), a record whose chunk is missing is not."""

from datetime import UTC, datetime

import pytest

from faults.stores import unreadable_records
from sagas.definitions.order_saga import OrderState
from sagas.machinery.history import CHUNK, History
from sagas.machinery.record import Record
from services.worker.positions import position_key

pytestmark = pytest.mark.unit
CODEC = Record.codec(OrderState)
NOW = datetime(2026, 1, 1, tzinfo=UTC)


def stored(key: str, record: Record[OrderState]) -> dict[bytes, bytes]:
    _, writes = record.writes(key, None)
    return {k.encode(): v for k, v in writes if v is not None}


def test_markers_and_whole_records_decode_and_a_record_missing_a_chunk_does_not() -> None:
    seen: History[None] = History()
    for n in range(CHUNK + 5):
        seen = seen.put(f"m{n}", None)
    whole = CODEC(state=OrderState(status="CONFIRMED"), seen=seen)
    store = {
        **stored("o1", whole),
        **stored("o2", whole.marker(OrderState(), NOW, NOW)),
        **stored("o3", whole),
        position_key("t.order-saga", 0).encode(): b"12",
        b"\x00deadline/2026-01-01T00:00:00.000000/o1": b"",
    }
    del store[b"o3\x1fseen/0"]  # o3's chunk is gone while its record still reads it
    [bad] = unreadable_records("order-saga-state", 0, store, CODEC)
    assert bad.key == b"o3" and "chunk 0 is missing" in bad.reason
    assert "unreadable" in str(bad)
