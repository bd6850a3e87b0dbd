"""What a worker's local table store would recover to, judged against its changelog.

After a crash Faust does not rebuild a table partition from its changelog: it keeps the
local RocksDB and re-applies the changelog records from the offset stored in that RocksDB
(the "persisted offset") on top. That is right only if the local store never holds a write
the changelog lacks. If it does (a write applied locally whose changelog record was still
in the producer's buffer when the process died), the re-applied records put some keys back
to older values while other keys keep newer ones: a mix no moment of the worker ever had.

:func:`recovery_mismatches` does what Faust's recovery does, on the files a killed worker
left, and compares the result with the changelog read to its end: they must be equal.
Run it while no worker holds the store (after a SIGKILL, before the restart).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rocksdict import AccessType, Options, Rdict

from faults.topics import read_topic
from sagas.machinery.history import is_chunk_key
from sagas.machinery.record import Record
from services.worker.faust_seam import PERSISTED_OFFSET_KEY, partition_path, partition_stores

WORKER_OWN = "\x00"
"""How every key the worker keeps beside the records starts (input positions, deadline
index entries): no envelope key can."""


@dataclass(frozen=True)
class Unreadable:
    """A key the recovered store holds whose record does not decode (a history chunk it
    reads is missing, or the bytes are no record): neither the key's state before a write
    nor after it. A retired key's marker decodes (it reads no chunk): retired is a state."""

    table: str
    partition: int
    key: bytes
    reason: str

    def __str__(self) -> str:
        return f"{self.table}[{self.partition}] key {self.key[:80]!r}: unreadable: {self.reason}"


@dataclass(frozen=True)
class Mismatch:
    table: str
    partition: int
    key: bytes
    recovered: bytes | None
    changelog: bytes | None
    offsets: tuple[int, ...] = ()
    """The changelog offsets of the key's records (a tombstone's marked with a minus)."""
    persisted: int | None = None
    """The store's persisted offset: records of the key below it were to be in the store."""

    def __str__(self) -> str:
        return (
            f"{self.table}[{self.partition}] key {self.key[:80]!r}: recovery gives "
            f"{_short(self.recovered)}, the changelog's last value is {_short(self.changelog)}"
            f" (the key's records at offsets {list(self.offsets)[-6:]}, a tombstone negative;"
            f" the store's persisted offset {self.persisted})"
        )


def _short(value: bytes | None) -> str:
    if value is None:
        return "nothing"
    return repr(value[:160]) + ("..." if len(value) > 160 else "")


def read_local(path: Path) -> tuple[dict[bytes, bytes], int | None]:
    """A table partition's RocksDB (read-only; its write-ahead log is replayed in memory):
    every key's value, and the persisted offset."""
    db = Rdict(str(path), Options(raw_mode=True), access_type=AccessType.read_only())
    try:
        items = {bytes(k): bytes(v) for k, v in db.items()}  # type: ignore[arg-type]
    finally:
        db.close()
    raw = items.pop(PERSISTED_OFFSET_KEY, None)
    return items, None if raw is None else int(raw)


async def recovery_mismatches(
    bootstrap: str,
    tables_dir: Path,
    app_id: str,
    table: str,
    record_type: type[Record[Any]] | None = None,
) -> list[Mismatch | Unreadable]:
    """Every key of ``table`` whose value after Faust's recovery would differ from the last
    value its changelog holds; and, given the table's ``record_type``, every record of the
    recovered store that does not decode (the key is neither retired nor not retired).
    Only the partitions ``tables_dir`` holds a store of: among several workers, the ones
    this worker held (active or standby); a partition without one recovers from the
    changelog alone, equal to it by construction."""
    changelog = f"{app_id}-{table}-changelog"
    records = await read_topic(bootstrap, changelog)
    partitions = {partition for _, partition, _ in partition_stores(tables_dir, table)}
    found: list[Mismatch | Unreadable] = []
    for partition in sorted(partitions):
        mine = sorted((r for r in records if r.partition == partition), key=lambda r: r.offset)
        recovered, persisted = read_local(partition_path(tables_dir, table, partition))
        last: dict[bytes, bytes | None] = {}
        offsets: dict[bytes, list[int]] = {}
        for r in mine:
            assert r.key is not None, f"{changelog}[{partition}]@{r.offset} has no key"
            last[r.key] = r.value
            offsets.setdefault(r.key, []).append(r.offset if r.value is not None else -r.offset)
            # Faust seeks to the persisted offset itself (not past it) and applies from there.
            if persisted is None or r.offset >= persisted:
                if r.value is None:
                    recovered.pop(r.key, None)
                else:
                    recovered[r.key] = r.value
        for key in sorted(set(recovered) | {k for k, v in last.items() if v is not None}):
            if recovered.get(key) != last.get(key):
                found.append(
                    Mismatch(
                        table,
                        partition,
                        key,
                        recovered.get(key),
                        last.get(key),
                        tuple(offsets.get(key, ())),
                        persisted,
                    )
                )
        if record_type is not None:
            found += unreadable_records(table, partition, recovered, record_type)
    return found


def unreadable_records(
    table: str, partition: int, store: dict[bytes, bytes], record_type: type[Record[Any]]
) -> list[Unreadable]:
    """Every record of ``store`` (history chunks and positions left out) that does not
    decode with its chunks from the same store."""
    found: list[Unreadable] = []
    for raw_key, value in store.items():
        key = raw_key.decode(errors="replace")
        if key.startswith(WORKER_OWN) or is_chunk_key(key):
            continue  # positions, deadline index entries, history chunks

        def load(name: str) -> bytes | None:
            return store.get(name.encode())

        try:
            record_type.decode(key, value, load)
        except ValueError as exc:
            found.append(Unreadable(table, partition, raw_key, str(exc)[:300]))
    return found
