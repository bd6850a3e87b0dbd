"""The projector's reads and writes, a batch at a time (one statement per table and batch).

Every function takes the connection of the batch's transaction; none commits.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Mapping, Sequence
from datetime import datetime
from typing import Any

from pydantic import BaseModel
from sqlalchemy import Connection, delete, select, update
from sqlalchemy.dialects import postgresql, sqlite

from readside import codec, schema
from readside.upsert import insert_if_absent, upsert
from sagas.messages import Envelope
from sagas.projections.declare import ReadModel
from sagas.projections.rows import TimelineRow


class Fenced(RuntimeError):
    """A batch's partition no longer stands at the offset the batch was read from: another
    projector process applied it meanwhile. The batch's transaction must roll back."""

    def __init__(self, topic: str, moved: Mapping[int, int | None]) -> None:
        self.topic = topic
        self.moved = dict(moved)
        """Partition -> the offset this batch expected to find stored (None: no row)."""
        shown = ", ".join(f"{p} (expected {o})" for p, o in sorted(self.moved.items()))
        super().__init__(f"{topic}: partition(s) {shown} moved on under another projector")


# Ids in one IN (...) list; keeps statements small on both backends.
IN_CHUNK = 1000


def in_chunks(items: Collection[str]) -> Iterator[list[str]]:
    """``items`` sorted, in lists short enough for one ``IN (...)``."""
    ordered = sorted(items)
    for start in range(0, len(ordered), IN_CHUNK):
        yield ordered[start : start + IN_CHUNK]


# --- reads -----------------------------------------------------------------------------


def load_positions(conn: Connection, keys: Collection[str]) -> dict[str, int]:
    t = schema.entity_positions
    found: dict[str, int] = {}
    for chunk in in_chunks(keys):
        query = select(t.c.entity_key, t.c.last_sequence).where(t.c.entity_key.in_(chunk))
        found.update({key: seq for key, seq in conn.execute(query)})
    return found


def load_pending(conn: Connection, keys: Collection[str]) -> list[Mapping[Any, Any]]:
    """Held events of ``keys``, as stored (the envelope still encoded)."""
    t = schema.pending_events
    found: list[Mapping[Any, Any]] = []
    for chunk in in_chunks(keys):
        query = select(t).where(t.c.entity_key.in_(chunk)).order_by(t.c.entity_key, t.c.sequence)
        found.extend(row._mapping for row in conn.execute(query))
    return found


def load_rows(conn: Connection, model: ReadModel[Any], ids: Collection[str]) -> dict[str, Any]:
    """The stored rows of ``model`` for these entity ids, by entity id."""
    t = schema.table_of(model)
    key = t.c[model.key]
    found: dict[str, Any] = {}
    for chunk in in_chunks(ids):
        for row in conn.execute(select(t).where(key.in_(chunk))):
            found[row._mapping[model.key]] = codec.row_of(model, row._mapping)
    return found


def load_checkpoints(conn: Connection, topic: str) -> dict[int, int]:
    t = schema.projection_checkpoints
    rows = conn.execute(select(t.c.partition, t.c.next_offset).where(t.c.topic == topic))
    return {partition: offset for partition, offset in rows}


# --- writes ----------------------------------------------------------------------------


def save_rows(conn: Connection, model: ReadModel[Any], rows: Sequence[BaseModel]) -> None:
    upsert(conn, schema.table_of(model), [codec.row_values(model, r) for r in rows])


def add_timeline(conn: Connection, rows: Sequence[TimelineRow]) -> None:
    # A step is a fact: once written it never changes, so a conflict keeps the stored one.
    upsert(conn, schema.saga_timeline, [codec.timeline_values(r) for r in rows], update=())


def save_positions(conn: Connection, positions: Mapping[str, int]) -> None:
    values = [{"entity_key": k, "last_sequence": s} for k, s in positions.items()]
    upsert(conn, schema.entity_positions, values)


def replace_pending(
    conn: Connection, keys: Collection[str], held: Sequence[tuple[Envelope, int, int, datetime]]
) -> None:
    """Make ``held`` (event, partition, offset, held since) the held events of ``keys``."""
    t = schema.pending_events
    for chunk in in_chunks(keys):
        conn.execute(delete(t).where(t.c.entity_key.in_(chunk)))
    values = [
        {
            "entity_key": event.key,
            "sequence": event.sequence,
            "topic_partition": partition,
            "topic_offset": offset,
            "envelope": event.encode().decode(),
            "held_since": codec.utc(since),
        }
        for event, partition, offset, since in held
    ]
    upsert(conn, t, values)


def add_receipts(conn: Connection, receipts: Sequence[Mapping[str, Any]]) -> None:
    # The first applied event of a command is its receipt; later ones change nothing. Sorted:
    # two projector processes inserting the same ids lock them in one order, never a cycle.
    ordered = sorted(receipts, key=lambda r: str(r["command_id"]))
    upsert(conn, schema.command_receipts, ordered, update=())


def save_checkpoints(conn: Connection, topic: str, next_offsets: Mapping[int, int]) -> None:
    values = [
        {"topic": topic, "partition": p, "next_offset": o} for p, o in sorted(next_offsets.items())
    ]
    upsert(conn, schema.projection_checkpoints, values)


def advance_checkpoints(
    conn: Connection, topic: str, moves: Mapping[int, tuple[int | None, int]]
) -> None:
    """The fence: move each partition's stored offset from where the batch was read
    (None: no row yet) to where it ends, only where it still stands there; raise
    :class:`Fenced` otherwise (the caller's transaction then rolls back whole).

    On PostgreSQL the UPDATE locks the partition's row, so of two transactions started from
    one offset the second waits for the first, then finds the offset moved (READ COMMITTED
    re-checks the WHERE on the row the first committed) and is refused; a row inserted
    concurrently is a conflict for the second insert. See services/projector/SCALING.md.
    """
    t = schema.projection_checkpoints
    moved: dict[int, int | None] = {}
    for partition, (start, end) in sorted(moves.items()):  # one lock order for every writer
        if start is None:
            row = {"topic": topic, "partition": partition, "next_offset": end}
            taken = insert_if_absent(conn, t, row)
        else:
            query = (
                update(t)
                .where(t.c.topic == topic, t.c.partition == partition, t.c.next_offset == start)
                .values(next_offset=end)
            )
            taken = conn.execute(query).rowcount == 1
        if not taken:
            moved[partition] = start
    if moved:
        raise Fenced(topic, moved)


def add_to_counters(conn: Connection, increments: Mapping[str, int]) -> None:
    """Add to the running totals in the database itself (``value = value + n``), so that
    projector processes committing side by side never lose each other's increments."""
    t = schema.projection_counters
    values = [{"name": k, "value": n} for k, n in sorted(increments.items()) if n]
    if not values:
        return
    dialect = postgresql if conn.dialect.name == "postgresql" else sqlite
    insert = dialect.insert(t)
    added = insert.on_conflict_do_update(
        index_elements=[t.c.name], set_={"value": t.c.value + insert.excluded.value}
    )
    conn.execute(added, values)


def prune_receipts(conn: Connection, older_than: datetime, limit: int | None = None) -> int:
    """Delete receipts applied before ``older_than`` (at most ``limit`` of them)."""
    t = schema.command_receipts
    old = t.c.applied_at < codec.utc(older_than)
    if limit is not None:
        old = t.c.command_id.in_(select(t.c.command_id).where(old).limit(limit))
    result = conn.execute(delete(t).where(old))
    return result.rowcount or 0
