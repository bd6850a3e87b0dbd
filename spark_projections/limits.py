"""Native mirror of :func:`readside.limits.unstorable_reason`: does an event fit
the read-model columns? Lengths and precisions come from the same SQLAlchemy columns.

Only the fast route uses this (see :mod:`spark_projections.parse`); a record that fails it
takes the exact route, where the projector's own function decides and words the reason.
The golden-record tests hold one record per limit and compare both routes.
"""

from __future__ import annotations

from decimal import Decimal

from pyspark.sql import Column
from pyspark.sql import functions as F
from sqlalchemy import Numeric, String

from readside import schema
from readside.limits import MAX_INT
from sagas.contracts.orders import OrderPlaced
from sagas.ids import COMMAND_ID_PREFIX

# FIXME entity type constants ['ORDER', 'PRODUCT']


def fits() -> Column:
    """Over the parsed envelope columns (``e_*``) and payload ``p``."""
    p = F.col("p")

    def env(name: str) -> Column:
        return F.col(f"e_{name}")

    placed = env("type") == OrderPlaced.TYPE
    external = F.coalesce(env("causation_id").startswith(COMMAND_ID_PREFIX), F.lit(False))
    entity = entity_id(env("key"))
    checks = [
        _short(env("key"), schema.entity_positions.c.entity_key),
        _short(env("type"), schema.saga_timeline.c.event_type),
        env("saga_id").isNull() | _short(env("saga_id"), schema.saga_timeline.c.saga_id),
        ~external | _short(env("causation_id"), schema.command_receipts.c.command_id),
        (env("entity_type") != ORDER) | _short(entity, schema.orders.c.order_id),
        (env("entity_type") != PRODUCT) | _short(entity, schema.product_stock.c.product_id),
        ~placed | _short(p["customer_id"], schema.orders.c.customer_id),
        ~placed | _short(p["payment_method"], schema.orders.c.payment_method),
        ~placed | _money_fits(p["total"], schema.orders.c.total),
        env("sequence").between(1, MAX_INT),
    ]
    result = F.lit(True)
    for check in checks:
        result = result & check
    return result


def entity_id(key: Column) -> Column:
    """What follows the first colon of an entity key (``rows.entity_id``)."""
    return key.substr(F.instr(key, ":") + 1, F.lit(1 << 30))


def _short(value: Column, column: object) -> Column:
    kind = column.type  # type: ignore[attr-defined]
    assert isinstance(kind, String) and kind.length is not None
    return F.length(value) <= kind.length


def _money_fits(value: Column, column: object) -> Column:
    """``abs(money(value)) < 10 ** (precision - scale)``; ``value`` is a canonical decimal."""
    kind = column.type  # type: ignore[attr-defined]
    assert isinstance(kind, Numeric) and kind.precision is not None
    limit = Decimal(10) ** (kind.precision - (kind.scale or 0))
    # Casting rounds half up, exactly like codec.money (quantize ROUND_HALF_UP).
    return F.abs(value.cast(f"decimal(38,{kind.scale or 0})")) < F.lit(limit)
