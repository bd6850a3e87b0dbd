"""The read side's retention: what of a finished saga leaves the SQL tables, and when.

A saga whose row has been in a final status for longer than ``SAGALINE_READ_RETENTION_S``
(the argument for its default is on the setting, runtime/settings.py) is *expired*: its
row in its saga model, its timeline rows and the positions of its own streams are deleted
together, in one transaction per batch. Its own streams are the entities keyed by its id
(``order:o-1`` and ``payment:o-1``; a product, a course or an account is shared by many
sagas, lives on, and keeps its row and position, as the worker keeps their records). The
rule reads only a saga model's status and ``updated_at`` (each model's
``(status, updated_at, id)`` index): every batch finds expired sagas that are still there,
so nothing is read twice and a prune costs what it deletes, never the history.

Receipts go by their own age (``SAGALINE_RECEIPT_RETENTION_H``): a consistency token is
waited for within a request, so a receipt's use ends long before its saga's.

The projector runs both between its batches (:mod:`services.projector.runner`), and the
Spark rebuild runs the same saga rule on its staging tables before it swaps them in
(``tables=``), so a rebuild never brings expired sagas back.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import Connection, Engine, Table, delete, select
from sqlalchemy.sql import TableClause, column, table

from readside import codec, schema, store
from readside.store import in_chunks
from sagas.catalog import SAGA_TYPES
from sagas.projections.declare import SagaType

Tables = Callable[[Table], TableClause]
"""Which physical table stands for a declared one: itself (the live tables), or a copy by
another name with the same columns (the rebuild's staging tables)."""


def live(t: Table) -> TableClause:
    return t


def named(name_of: Callable[[Table], str]) -> Tables:
    """Tables with the declared columns under the names ``name_of`` gives."""

    def renamed(t: Table) -> TableClause:
        return table(name_of(t), *(column(c.name, c.type) for c in t.columns))

    return renamed


@dataclass
class Pruned:
    """What a prune deleted."""

    sagas: int = 0
    timeline: int = 0
    positions: int = 0
    more: bool = False
    """It stopped at its batch limit with expired sagas left (the next prune goes on)."""

    def add(self, other: Pruned) -> None:
        self.sagas += other.sagas
        self.timeline += other.timeline
        self.positions += other.positions


def own_streams(saga_id: str, entity_keys: Iterable[str]) -> set[str]:
    """The keys among ``entity_keys`` (the streams in the saga's timeline) that are the
    saga's own: those whose entity id is the saga id."""
    return {k for k in entity_keys if k.split(":", 1)[-1] == saga_id}


def expired(
    conn: Connection, saga: SagaType, cutoff: datetime, limit: int, tables: Tables = live
) -> list[str]:
    """Up to ``limit`` ids of ``saga``'s instances final since before ``cutoff``."""
    t = tables(schema.table_of(saga.model))
    query = (
        select(t.c[saga.model.key])
        .where(
            t.c[saga.status_column].in_(sorted(saga.statuses.final)),
            t.c[saga.updated_column] < codec.utc(cutoff),
        )
        .limit(limit)
    )
    return [str(i) for i in conn.execute(query).scalars()]


def forget(conn: Connection, saga: SagaType, ids: Collection[str], tables: Tables = live) -> Pruned:
    """Delete the rows of these sagas: their model rows, timelines and own streams'
    positions."""
    timeline = tables(schema.saga_timeline)
    positions = tables(schema.entity_positions)
    model = tables(schema.table_of(saga.model))
    pruned = Pruned(sagas=len(ids))
    for chunk in in_chunks(ids):
        streams = {saga.key(i) for i in chunk}
        query = select(timeline.c.saga_id, timeline.c.entity_key).where(
            timeline.c.saga_id.in_(chunk)
        )
        for saga_id, key in conn.execute(query):
            streams |= own_streams(saga_id, [key])
        done = conn.execute(delete(timeline).where(timeline.c.saga_id.in_(chunk)))
        pruned.timeline += done.rowcount or 0
        for keys in in_chunks(streams):
            done = conn.execute(delete(positions).where(positions.c.entity_key.in_(keys)))
            pruned.positions += done.rowcount or 0
        conn.execute(delete(model).where(model.c[saga.model.key].in_(chunk)))
    return pruned


def prune_sagas(
    engine: Engine,
    cutoff: datetime,
    batch: int,
    max_batches: int | None = None,
    tables: Tables = live,
    sagas: Iterable[SagaType] = SAGA_TYPES,
) -> Pruned:
    """Forget the sagas final since before ``cutoff``, ``batch`` of them per transaction,
    at most ``max_batches`` transactions (None: until none is left)."""
    total = Pruned()
    left = max_batches
    for saga in sagas:
        while left is None or left > 0:
            with engine.begin() as conn:
                ids = expired(conn, saga, cutoff, batch, tables)
                total.add(forget(conn, saga, ids, tables))
            left = None if left is None else left - 1
            if len(ids) < batch:
                break
        else:
            total.more = True
            return total
    return total


def prune_receipts(engine: Engine, cutoff: datetime, batch: int, max_batches: int) -> int:
    """Delete receipts applied before ``cutoff``, ``batch`` per transaction, at most
    ``max_batches`` transactions; how many went."""
    gone = 0
    for _ in range(max_batches):
        with engine.begin() as conn:
            done = store.prune_receipts(conn, cutoff, limit=batch)
        gone += done
        if done < batch:
            break
    return gone
