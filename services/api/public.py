"""The read models as the API shows them: one response model per route, built from rows."""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal

from pydantic import BaseModel, Field

from sagas.catalog import saga_type
from sagas.contracts.orders import OrderLine
from sagas.projections.orders import ORDERS, OrderRow
from sagas.projections.rows import TimelineRow
from sagas.projections.stock import StockRow

_ORDER_SAGA = saga_type(ORDERS.entity_type)


class OrderPublic(BaseModel):
    order_id: str
    customer_id: str
    status: str = Field(description="PENDING ... CONFIRMED, REJECTED or CANCELLED")
    final: bool = Field(description="True once the status can no longer change")
    reason: str | None = Field(description="Why the order failed, when it did")
    lines: list[OrderLine]
    total: Decimal
    payment_method: str
    created_at: datetime
    updated_at: datetime
    last_sequence: int = Field(description="Sequence of the order's last applied event")

    @classmethod
    def of(cls, row: OrderRow) -> OrderPublic:
        return cls(
            **row.model_dump(exclude={"lines"}),
            lines=list(row.lines),
            final=_ORDER_SAGA.is_final(row.status),
        )


class CustomerOrders(BaseModel):
    customer_id: str
    orders: list[OrderPublic] = Field(description="The most recent orders, newest first")


class StockPublic(BaseModel):
    product_id: str
    on_hand: int
    reserved: int
    available: int = Field(description="on_hand - reserved: what a new order can still get")
    updated_at: datetime
    last_sequence: int

    @classmethod
    def of(cls, row: StockRow) -> StockPublic:
        return cls(**row.model_dump())


class TimelineStep(BaseModel):
    at: datetime
    entity_key: str = Field(description="The entity the step happened to (order:..., product:...)")
    sequence: int
    event_type: str
    summary: str

    @classmethod
    def of(cls, row: TimelineRow) -> TimelineStep:
        return cls(at=row.occurred_at, **row.model_dump(exclude={"saga_id", "occurred_at"}))


class TimelinePublic(BaseModel):
    saga_id: str
    saga_type: str | None = Field(
        description="The saga's type (the entity type of its own stream: order...), "
        "None while its own first event is not projected"
    )
    status: str | None = Field(description="The saga's current status, as its type declares")
    reason: str | None
    final: bool
    steps: list[TimelineStep] = Field(description="Every step, oldest first")


class PartitionStatus(BaseModel):
    partition: int
    applied_offset: int = Field(description="Offsets below this one are applied")
    end_offset: int | None = Field(description="The partition's end offset (None: broker down)")
    lag: int | None = Field(description="Records written but not applied yet")


class ProjectionStatus(BaseModel):
    topic: str
    partitions: list[PartitionStatus]
    total_lag: int | None
    held_events: int = Field(description="Events waiting for an earlier one of their entity")
    oldest_held_since: datetime | None
    gap_alert: bool = Field(description="True when an event has been held past gap_alert_s")
    counters: dict[str, int] = Field(
        description="applied, duplicates, unknown_type and dead_lettered events so far"
    )
