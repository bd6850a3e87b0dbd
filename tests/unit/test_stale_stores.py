"""Which local stores a worker discards before recovery: those whose last applied changelog
record is older than the tombstone retention allows, or gone (services/worker/stale_stores)."""

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from aiokafka import TopicPartition
from rocksdict import Options, Rdict

from runtime.settings import Settings
from services.worker.stale_stores import (
    MAX_AGE,
    PERSISTED_OFFSET_KEY,
    LocalStore,
    Returning,
    judge,
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


def test_the_age_allowed_is_the_retention_less_a_twenty_fourth_or_ten_minutes() -> None:
    assert timedelta(hours=23) == MAX_AGE  # of the day Sagaline declares
    assert max_age(timedelta(hours=2)) == timedelta(hours=1, minutes=50)
    assert max_age(timedelta(seconds=60)) < timedelta(0)  # as the soak shortens it: none kept


CHANGELOG = "a-t-state-changelog"


def _store(tmp_path: Path, partition: int, persisted: bytes | None) -> Path:
    path = tmp_path / f"t-state-{partition}.db"
    db = Rdict(str(path), Options(raw_mode=True))
    db[b"k"] = b"v"
    if persisted is not None:
        db[PERSISTED_OFFSET_KEY] = persisted
    db.close()
    return path


class _Db:
    closed = False

    def close(self) -> None:
        self.closed = True


class _FaustStore:
    def __init__(self, dbs: dict[int, _Db]) -> None:
        self._dbs = dbs


async def test_judge_keeps_a_young_store_and_discards_every_other(tmp_path: Path) -> None:
    young, old, gone, empty = (
        _store(tmp_path, p, o) for p, o in enumerate((b"10", b"11", b"12", None))
    )
    unreadable = tmp_path / "t-state-4.db"
    unreadable.mkdir()  # a directory without RocksDB's files: a removal cut short
    open_db = _Db()
    faust_store = _FaustStore({0: open_db})
    returning = [
        Returning(faust_store if p == 0 else None, CHANGELOG, p, path)
        for p, path in enumerate((young, old, gone, empty, unreadable))
    ]
    asked: list[list[LocalStore]] = []

    async def ask(stores: list[LocalStore]) -> tuple[timedelta, dict[TopicPartition, datetime]]:
        asked.append(stores)
        written = {
            TopicPartition(CHANGELOG, 0): NOW - timedelta(hours=2),
            TopicPartition(CHANGELOG, 1): NOW - timedelta(days=2),
        }
        return timedelta(days=1), written

    lines = await judge(settings_stub(), returning, ask, clock=lambda: NOW)
    assert [(s.partition, s.persisted) for s in asked[0]] == [(0, 10), (1, 11), (2, 12)]
    assert [line.split(":")[0] for line in lines] == [
        f"discarded the local store {p.name}" for p in (old, gone, empty, unreadable)
    ]
    assert "written 2 days, 0:00:00 ago" in lines[0]
    assert "(offset 12) is gone" in lines[1]
    assert "holds no persisted offset" in lines[2]
    assert "cannot be read" in lines[3]
    assert young.exists() and not any(p.exists() for p in (old, gone, empty, unreadable))
    assert not list(tmp_path.glob(".*discarded"))
    # the young store's database, open in the store, was closed and is opened again by Faust
    assert open_db.closed and faust_store._dbs == {}


async def test_judge_discards_every_store_the_broker_cannot_judge(tmp_path: Path) -> None:
    paths = [_store(tmp_path, p, b"10") for p in range(2)]

    async def ask(stores: list[LocalStore]) -> tuple[timedelta, dict[TopicPartition, datetime]]:
        raise TimeoutError("2 changelog partition(s) not read in 10.0 s")

    returning = [Returning(None, CHANGELOG, p, path) for p, path in enumerate(paths)]
    lines = await judge(settings_stub(), returning, ask, clock=lambda: NOW)
    assert len(lines) == 2 and all("the broker could not judge it" in line for line in lines)
    assert not any(p.exists() for p in paths)


def settings_stub() -> Settings:
    return Settings()  # judge reads the broker's settings only when it is not given ``ask``
