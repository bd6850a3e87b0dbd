"""Product commands: set stock."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Path, Request, Response

from runtime.topics import INVENTORY
from services.api.body import StrictJsonRoute
from services.api.commands import Accepted, accepted, dispatch
from services.api.deps import BusDep, IdempotencyKey, claim
from services.api.errors import documented
from services.api.requests import ENTITY_ID, StockRequest

router = APIRouter(prefix="/products", tags=["products"], route_class=StrictJsonRoute)

ProductId = Annotated[str, Path(min_length=1, max_length=100, pattern=ENTITY_ID)]


class StockAccepted(Accepted):
    product_id: str
    on_hand: int
    status: Literal["ACCEPTED"] = "ACCEPTED"


@router.put(
    "/{product_id}/stock",
    status_code=202,
    response_model=StockAccepted,
    responses=documented(400, 404, 415, 503, s404="No route matches (a product id with a '/')"),
)
async def set_stock(
    request: Request,
    product_id: ProductId,
    stock: StockRequest,
    bus: BusDep,
    idempotency_key: IdempotencyKey = None,
) -> Response:
    """Set a product's units on hand; the inventory refuses (an event says why) a count
    below the units reserved."""
    message_id = claim(request, f"stock/{product_id}", idempotency_key, stock).command()
    await dispatch(bus, INVENTORY, stock.command(), key=product_id, message_id=message_id)
    return accepted(
        StockAccepted, product_id=product_id, on_hand=stock.on_hand, consistency_token=message_id
    )
