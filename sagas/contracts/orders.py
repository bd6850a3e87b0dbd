"""Order saga contracts: what a client asks for and what the saga records."""

from decimal import Decimal
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from sagas.messages import Message, Summary

OrderStatus = Literal[
    "PENDING", "AUTHORIZING", "CONFIRMING", "CAPTURING", "CONFIRMED", "REJECTED", "CANCELLED"
]
FINAL_STATUSES: frozenset[str] = frozenset({"CONFIRMED", "REJECTED", "CANCELLED"})
FAILED_STATUSES: frozenset[str] = frozenset({"REJECTED", "CANCELLED"})
"""The order did not go through: refused at once, or compensated after a step failed."""


class OrderLine(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    product_id: str = Field(min_length=1, max_length=100, pattern=r"^[A-Za-z0-9._:-]+$")
    quantity: int = Field(gt=0, le=1_000_000)
    unit_price: Decimal = Field(ge=0, max_digits=12, decimal_places=2)


class PaymentDetails(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    method: str = Field(min_length=1, max_length=50)


class PlaceOrder(Message):
    TYPE = "order.Place"
    customer_id: str = Field(min_length=1, max_length=100)
    lines: tuple[OrderLine, ...] = Field(min_length=1, max_length=100)
    payment: PaymentDetails

    @field_validator("lines")
    @classmethod
    def _lines_distinct(cls, lines: tuple[OrderLine, ...]) -> tuple[OrderLine, ...]:
        # Two lines for one product would be two reservations for one order on one key;
        # we ask the client to merge them so an order line maps to exactly one reservation.
        ids = [line.product_id for line in lines]
        if len(set(ids)) != len(ids):
            raise ValueError("each product may appear on only one line; merge the quantities")
        return lines

    @property
    def total(self) -> Decimal:
        return sum((line.unit_price * line.quantity for line in self.lines), Decimal(0))


class CancelOrder(Message):
    TYPE = "order.Cancel"
    reason: str = Field("cancelled by customer", max_length=1000)


class OrderPlaced(Message):
    TYPE = "order.Placed"
    # The saga starts PENDING with this fact (no status event says so): the timeline says it.
    SUMMARY = Summary(
        "order placed by {customer_id}: {lines:count} line(s), total {total}; status PENDING"
    )
    customer_id: str
    lines: tuple[OrderLine, ...]
    payment_method: str
    total: Decimal


class OrderStatusChanged(Message):
    """The order moved to ``status``; ``reason`` says why when it failed."""

    TYPE = "order.StatusChanged"
    SUMMARY = Summary("status {status}", when="reason", then="status {status}: {reason}")
    status: OrderStatus
    reason: str | None = None


class CancelRefused(Message):
    TYPE = "order.CancelRefused"
    SUMMARY = Summary("cancel refused: {reason}")
    status: OrderStatus
    reason: str
