"""How the list-shaped read models are ordered: a customer's order history, a saga's timeline.

The customer history is a category projection: it spans every order stream and is defined
over :class:`~sagas.projections.rows.OrderRow` values, not over one entity's events. The SQL
queries of the online read side and the Spark rebuild must list rows in exactly this order
(tests compare them with these functions).
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from sagas.projections.orders import OrderRow
from sagas.projections.rows import TimelineRow

DEFAULT_HISTORY_LIMIT = 30


def history_key(row: OrderRow) -> tuple[datetime, str]:
    """Sort key of the history, applied in *descending* order: newest first, then by id
    (descending too) so two orders placed in the same instant still list the same way."""
    return (row.created_at, row.order_id)


def customer_history(
    orders: Iterable[OrderRow], customer_id: str, limit: int = DEFAULT_HISTORY_LIMIT
) -> list[OrderRow]:
    """A customer's ``limit`` most recent orders, newest first."""
    mine = [row for row in orders if row.customer_id == customer_id]
    return sorted(mine, key=history_key, reverse=True)[:limit]


def timeline_key(row: TimelineRow) -> tuple[datetime, str, int]:
    """Sort key of a saga's timeline: by time; steps of one instant by entity, then sequence."""
    return (row.occurred_at, row.entity_key, row.sequence)


def saga_timeline(rows: Iterable[TimelineRow], saga_id: str) -> list[TimelineRow]:
    """Every step of one saga, oldest first."""
    return sorted((r for r in rows if r.saga_id == saga_id), key=timeline_key)
