"""Which local stores a worker discards before recovery: those whose last applied changelog
record is older than the tombstone retention allows, or gone (services/worker/stale_stores)."""

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from aiokafka import TopicPartition
from rocksdict import Options, Rdict

from services.worker.stale_stores import (
    MAX_AGE,
    PERSISTED_OFFSET_KEY,
    LocalStore,
    local_stores,
    max_age,
    stale,
)

pytestmark = pytest.mark.unit
NOW = datetime(2026, 3, 1, tzinfo=UTC)


def test_a_store_is_discarded_when_its_last_record_is_too_old_or_gone() -> None:
    fresh, old, gone = (
        LocalStore(Path(f"t-state-{p}.db"), "a-t-state-changelog", p, 10) for p in range(3)
    )
    written = {
        TopicPartition("a-t-state-changelog", 0): NOW - timedelta(hours=2),
        TopicPartition("a-t-state-changelog", 1): NOW - timedelta(days=2),
    }
    found = stale([fresh, old, gone], written, NOW, MAX_AGE)
    assert [(s.partition, reason) for s, reason in found] == [
        (1, "its last record was written 2 days, 0:00:00 ago"),
        (2, "its last record (offset 10) is gone"),
    ]


def test_the_age_allowed_is_the_tombstone_retention_less_a_twenty_fourth() -> None:
    assert timedelta(hours=23) == MAX_AGE  # of the day Sagaline declares
    assert max_age(timedelta(seconds=60)) == timedelta(seconds=57.5)  # as the soak shortens it


def test_local_stores_are_read_with_their_persisted_offsets(tmp_path: Path) -> None:
    for name, persisted in (("order-saga-state-3.db", b"41"), ("payment-state-0.db", None)):
        db = Rdict(str(tmp_path / name), Options(raw_mode=True))
        db[b"k"] = b"v"
        if persisted is not None:
            db[PERSISTED_OFFSET_KEY] = persisted
        db.close()
    [store] = local_stores(tmp_path, "app")
    assert (store.changelog, store.partition, store.persisted) == (
        "app-order-saga-state-changelog",
        3,
        41,
    )
