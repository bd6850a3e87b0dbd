"""Request bodies whose JSON Schema says exactly what the API accepts.

The saga contracts (``PlaceOrder``, ``OrderLine``) are the truth for the saga; their JSON
Schema is not exact enough for a client: a ``Decimal`` field is documented as "any number
or any string", then refuses ``""``, ``"1e2"`` or ``0.125``. These models accept what their
schema documents, no more and no less, and turn into the contract messages.
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, WithJsonSchema, field_validator

from sagas.contracts.ledger import SetCapacity
from sagas.contracts.orders import OrderLine, PaymentDetails, PlaceOrder
from services.api.errors import NO_NUL_PATTERN

MAX_PRICE = Decimal("9999999999.99")
"""``OrderLine.unit_price`` has at most 12 digits, 2 of them after the point."""
CENT = Decimal("0.01")
PRICE_PATTERN = r"^[0-9]{1,10}(\.[0-9]{1,2})?$"
TEXT = NO_NUL_PATTERN
ENTITY_ID = r"^[A-Za-z0-9._:-]+$"
"""An id that becomes a Kafka key and a table key (products, orders): plain characters only,
so no envelope built from it is refused (keys must be printable)."""


def _price(value: Any) -> Decimal:
    """A number that is a whole multiple of 0.01 (as JSON Schema's multipleOf reads the
    number's shortest decimal form), or a decimal string like "12.50"."""
    if isinstance(value, bool) or not isinstance(value, int | float | str | Decimal):
        raise ValueError('a price is a number or a decimal string like "12.50"')
    if isinstance(value, str):
        if not re.fullmatch(PRICE_PATTERN, value):
            raise ValueError('a price string is digits with at most 2 decimals, like "12.50"')
        return Decimal(value)
    try:
        price = Decimal(repr(value)) if isinstance(value, float) else Decimal(value)
    except InvalidOperation as exc:
        raise ValueError("a price must be a finite number") from exc
    if not price.is_finite() or not 0 <= price <= MAX_PRICE:
        raise ValueError(f"a price is between 0 and {MAX_PRICE}")
    if price != price.quantize(CENT):  # in range, so quantize cannot overflow
        raise ValueError("a price has at most 2 decimals")
    return price


Price = Annotated[
    Decimal,
    BeforeValidator(_price),
    WithJsonSchema(
        {
            "anyOf": [
                {"type": "number", "minimum": 0, "maximum": 9999999999.99, "multipleOf": 0.01},
                {"type": "string", "pattern": PRICE_PATTERN},
            ],
            "description": 'Unit price: a number with at most 2 decimals, or a string ("12.50")',
        }
    ),
]


def _whole(value: Any) -> int:
    """JSON Schema's integer: 3 or 3.0, never true or "3" (pydantic's lax mode takes both,
    its strict mode refuses 3.0)."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError("expected a whole number")
    return value


WholeNumber = Annotated[int, BeforeValidator(_whole)]


class LineRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    product_id: str = Field(min_length=1, max_length=100, pattern=ENTITY_ID)
    quantity: WholeNumber = Field(gt=0, le=1_000_000)
    unit_price: Price


class PaymentRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    method: str = Field(min_length=1, max_length=50, pattern=TEXT)


class OrderRequest(BaseModel):
    """The body of POST /orders: one line per product (merge the quantities of a product)."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [
                {
                    "customer_id": "c-1",
                    "lines": [{"product_id": "p-1", "quantity": 1, "unit_price": "9.90"}],
                    "payment": {"method": "card"},
                }
            ]
        },
    )
    customer_id: str = Field(min_length=1, max_length=100, pattern=TEXT)
    lines: list[LineRequest] = Field(min_length=1, max_length=100)
    payment: PaymentRequest

    @field_validator("lines")
    @classmethod
    def _one_line_per_product(cls, lines: list[LineRequest]) -> list[LineRequest]:
        ids = [line.product_id for line in lines]
        if len(set(ids)) != len(ids):
            raise ValueError("each product may appear on only one line; merge the quantities")
        return lines

    def command(self) -> PlaceOrder:
        """The saga's command (its own validation holds: these fields are stricter)."""
        return PlaceOrder(
            customer_id=self.customer_id,
            lines=tuple(OrderLine(**line.model_dump()) for line in self.lines),
            payment=PaymentDetails(method=self.payment.method),
        )


MAX_ON_HAND = 2**31 - 1
"""The read model stores stock counts as SQL INTEGER: a larger count would be accepted here
and then fail in the projector, so the API refuses it."""


class StockRequest(BaseModel):
    """The body of PUT /products/{id}/stock: ``SetCapacity`` with the read model's bound."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [{"on_hand": 3}]})
    on_hand: WholeNumber = Field(ge=0, le=MAX_ON_HAND, description="Units on hand from now on")

    def command(self) -> SetCapacity:
        return SetCapacity(on_hand=self.on_hand)
