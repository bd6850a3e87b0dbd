"""``INSERT ... ON CONFLICT`` of many rows, for PostgreSQL and SQLite (the same SQL on both).

One statement object per call shape, executed with the whole list of rows: SQLAlchemy then
caches its compiled form and sends the rows in multi-row VALUES pages ("insertmanyvalues"),
which is several times faster than compiling one big multi-row statement per batch.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import Connection, Insert, Table
from sqlalchemy.dialects import postgresql, sqlite


def upsert(
    conn: Connection,
    table: Table,
    rows: Sequence[Mapping[str, Any]],
    *,
    update: Sequence[str] | None = None,
) -> None:
    """Insert ``rows``; on a primary-key conflict overwrite the columns in ``update`` (every
    non-key column by default), or keep the stored row when ``update`` is empty.

    ``rows`` must not repeat a key: PostgreSQL refuses to update one row twice in one
    statement.
    """
    if not rows:
        return
    keys = [c.name for c in table.primary_key.columns]
    if update is None:
        update = [name for name in rows[0] if name not in keys]
    conn.execute(_statement(conn.dialect.name, table, keys, update), list(rows))


def insert_if_absent(conn: Connection, table: Table, row: Mapping[str, Any]) -> bool:
    """Insert ``row`` unless its primary key is stored already; True when it was inserted."""
    keys = [c.name for c in table.primary_key.columns]
    # RETURNING, not rowcount: psycopg reports -1 for an INSERT ... ON CONFLICT here.
    statement = _statement(conn.dialect.name, table, keys, ()).values(dict(row))
    inserted = conn.execute(statement.returning(*table.primary_key.columns)).first()
    return inserted is not None


def _statement(dialect: str, table: Table, keys: list[str], update: Sequence[str]) -> Insert:
    if dialect == "postgresql":
        pg = postgresql.insert(table)
        if not update:
            return pg.on_conflict_do_nothing(index_elements=keys)
        return pg.on_conflict_do_update(
            index_elements=keys, set_={name: pg.excluded[name] for name in update}
        )
    if dialect == "sqlite":
        lite = sqlite.insert(table)
        if not update:
            return lite.on_conflict_do_nothing(index_elements=keys)
        return lite.on_conflict_do_update(
            index_elements=keys, set_={name: lite.excluded[name] for name in update}
        )
    raise ValueError(f"the read models support PostgreSQL and SQLite, not {dialect}")
