"""Order commands: place and cancel; and the orders domain's routers (its API module,
named by ``sagas.domains.orders``)."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Path, Request, Response
from pydantic import BaseModel, ConfigDict, Field

from runtime.topics import ORDER_SAGA
from sagas.contracts.orders import CancelOrder
from sagas.ids import external_command_id
from services.api import products, queries
from services.api.body import StrictJsonRequest, StrictJsonRoute
from services.api.commands import Accepted, accepted, dispatch
from services.api.deps import BusDep, IdempotencyKey, claim
from services.api.errors import documented
from services.api.fastpath import fast_path, idempotency_key, json_body, plain_json, validated
from services.api.idempotency import Ids
from services.api.requests import ENTITY_ID, TEXT, OrderRequest
from services.bus import CommandBus

router = APIRouter(prefix="/orders", tags=["orders"], route_class=StrictJsonRoute)


class OrderAccepted(Accepted):
    order_id: str
    status: Literal["PENDING"] = "PENDING"


class CancelAccepted(Accepted):
    order_id: str
    status: Literal["CANCEL_REQUESTED"] = "CANCEL_REQUESTED"


class CancelRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")  # like every request body: a stray field is a 422

    reason: str = Field("cancelled by customer", max_length=1000, pattern=TEXT)


async def _place_fast(request: StrictJsonRequest) -> Response | None:
    """POST /orders for a plainly valid request (services.api.fastpath); None: the route's
    FastAPI handler answers it (every error included). The key gate admitted it already."""
    if not plain_json(request):
        return None
    usable, key = idempotency_key(request)
    if not usable:
        return None
    usable, value = await json_body(request)
    if not usable or (order := validated(OrderRequest, value)) is None:
        return None
    return await _place(order, request.app.state.bus, claim(request, "order", key, order))


@router.post("", status_code=202, response_model=OrderAccepted, responses=documented(400, 415, 503))
@fast_path(_place_fast)
async def place_order(
    request: Request, order: OrderRequest, bus: BusDep, idempotency_key: IdempotencyKey = None
) -> Response:
    """Place an order: its saga reserves each line's stock, authorizes the payment,
    confirms the stock and captures the payment, or compensates what it did. Answers 202
    with the order id and a consistency token (pass it to a GET to read your write)."""
    return await _place(order, bus, claim(request, "order", idempotency_key, order))


async def _place(order: OrderRequest, bus: CommandBus, ids: Ids) -> Response:
    order_id = ids.entity()
    message_id = external_command_id(order_id, "place")
    command = order.command()
    await dispatch(bus, ORDER_SAGA, command, key=order_id, saga_id=order_id, message_id=message_id)
    return accepted(OrderAccepted, order_id=order_id, consistency_token=message_id)


@router.post(
    "/{order_id}/cancel",
    status_code=202,
    response_model=CancelAccepted,
    responses=documented(400, 404, 415, 503, s404="No route matches (an order id with a '/')"),
)
async def cancel_order(
    request: Request,
    order_id: Annotated[str, Path(min_length=1, max_length=200, pattern=ENTITY_ID)],
    bus: BusDep,
    body: CancelRequest | None = None,
    idempotency_key: IdempotencyKey = None,
) -> Response:
    """Ask the order's saga to cancel: before the payment is captured it compensates every
    step taken (stock released, payment voided) and ends CANCELLED; later, the saga refuses
    and its timeline says why."""
    cancel = body or CancelRequest()  # no body and the default reason are one request
    message_id = claim(request, f"cancel/{order_id}", idempotency_key, cancel).command()
    await dispatch(
        bus,
        ORDER_SAGA,
        CancelOrder(reason=cancel.reason),
        key=order_id,
        saga_id=order_id,
        message_id=message_id,
    )
    return accepted(CancelAccepted, order_id=order_id, consistency_token=message_id)


# The orders domain's routers: its commands (orders, stock) and its reads, which live with
# the read side's shared dependencies in services.api.queries.
COMMAND_ROUTERS = (router, products.router)
QUERY_ROUTERS = (queries.orders, queries.customers, queries.products)
TAGS = (
    {"name": "orders", "description": "Place and cancel orders; read one (its saga's status)"},
    {"name": "customers", "description": "A customer's order history"},
    {"name": "products", "description": "Stock: set units on hand, read what is available"},
)
