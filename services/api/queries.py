"""Read models out: one router per resource, every GET able to wait for the caller's write.

A GET that carries a consistency token (from a 202 body) first waits until the projector
has applied that command, so a client never reads a model older than its own write.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Annotated, Any, TypeVar

from fastapi import APIRouter, Depends, Header, HTTPException, Path, Query, Request
from pydantic import BaseModel
from sqlalchemy import Connection, Engine
from sqlalchemy.exc import SQLAlchemyError

from readside import queries
from runtime.topics import EVENTS
from sagas.catalog import SAGA_TYPES, saga_type
from sagas.projections.declare import ReadModel, SagaType
from sagas.projections.orders import ORDERS
from sagas.projections.rows import TimelineRow
from sagas.projections.stock import PRODUCT_STOCK
from services.api import saga_list
from services.api.body import StrictJsonRoute
from services.api.deps import SettingsDep
from services.api.errors import documented
from services.api.freshness import ReadWatch
from services.api.public import (
    CustomerOrders,
    OrderPublic,
    ProjectionStatus,
    StockPublic,
    TimelinePublic,
    TimelineStep,
)
from services.api.requests import TEXT
from services.projector.offsets import EndOffsets
from services.projector.status import projection_status

log = logging.getLogger(__name__)
T = TypeVar("T")
M = TypeVar("M", bound=BaseModel)
DEFAULT_WAIT_S = 5.0
MAX_WAIT_S = 30.0
TOKEN_PATTERN = r"^cmd-[0-9a-f]{32}$"
TOKEN_LENGTH = 36
"""Said as well as the pattern: a generator reading ``$`` as Python does would add a "\n"."""


# --- dependencies ----------------------------------------------------------------------


def _read_side(request: Request, name: str) -> Any:
    """Set by the API's lifespan; absent when an app runs without it (some tests)."""
    value = getattr(request.app.state, name, None)
    if value is None:
        raise HTTPException(503, "this API process has no read-model database")
    return value


def get_engine(request: Request) -> Engine:
    engine: Engine = _read_side(request, "engine")
    return engine


def get_watch(request: Request) -> ReadWatch:
    watch: ReadWatch = _read_side(request, "watch")
    return watch


def get_end_offsets(request: Request) -> EndOffsets:
    offsets: EndOffsets = _read_side(request, "end_offsets")
    return offsets


EngineDep = Annotated[Engine, Depends(get_engine)]
WatchDep = Annotated[ReadWatch, Depends(get_watch)]
EndOffsetsDep = Annotated[EndOffsets, Depends(get_end_offsets)]


@dataclass(frozen=True)
class ReadAfter:
    """The read-your-writes check of one GET: the caller's token, if any, and its budget.

    ``deadline`` ends the caller's ``wait`` budget (event-loop time), which a route may
    spend on waiting for more (a settled status); ``wait_given`` says the caller set one.
    """

    deadline: float
    wait_given: bool
    token: str | None
    budget: float
    watch: ReadWatch
    engine: Engine
    events_topic: str
    end_offsets: EndOffsets

    def remaining(self) -> float:
        return max(self.deadline - asyncio.get_running_loop().time(), 0.0)

    async def applied(self) -> None:
        """Return once the caller's command is applied; 504 after the budget.

        Every route awaits this first, in its body: FastAPI runs a dependency before it
        validates the route's own parameters, so a waiting dependency would hold a request
        with an invalid id for the whole wait and answer 504 instead of 422.
        """
        if self.token is None or await self.watch.receipt(self.token, self.budget):
            return
        # The watch only learns at its next poll: with ``wait=0`` (or a receipt that came
        # at the deadline) ask the database once before answering 504.
        if await read_query(self.engine, _applied, self.token):
            return
        lag = await _lag(self.engine, self.events_topic, self.end_offsets)
        raise HTTPException(
            504,
            f"the projector has not caught up with your write (consistency token {self.token}) "
            f"within {self.budget:g} s; current lag: {lag}. Retry later.",
        )


async def read_after(
    engine: EngineDep,
    watch: WatchDep,
    end_offsets: EndOffsetsDep,
    settings: SettingsDep,
    consistency_token: Annotated[
        str | None,
        Query(
            pattern=TOKEN_PATTERN,
            min_length=TOKEN_LENGTH,
            max_length=TOKEN_LENGTH,
            description="A token from a 202 body: answer only once that command is applied",
        ),
    ] = None,
    x_consistency_token: Annotated[
        str | None,
        Header(
            pattern=TOKEN_PATTERN,
            min_length=TOKEN_LENGTH,
            max_length=TOKEN_LENGTH,
            description="The same as ?consistency_token=",
        ),
    ] = None,
    wait: Annotated[
        float | None,
        Query(
            ge=0,
            le=MAX_WAIT_S,
            description=f"Seconds to wait (for the token: default {DEFAULT_WAIT_S:g}; "
            "GET /orders/{id} and GET /enrollments/{id} also wait this long for a settled "
            "status: an order's final one, an enrollment's not PENDING or TRANSFERRING)",
        ),
    ] = None,
) -> ReadAfter:
    budget = DEFAULT_WAIT_S if wait is None else wait
    return ReadAfter(
        deadline=asyncio.get_running_loop().time() + budget,
        wait_given=wait is not None,
        token=consistency_token or x_consistency_token,
        budget=budget,
        watch=watch,
        engine=engine,
        events_topic=settings.topic(EVENTS),
        end_offsets=end_offsets,
    )


def _applied(conn: Connection, token: str) -> bool:
    return token in queries.receipts_among(conn, frozenset({token}))


async def _lag(engine: Engine, topic: str, end_offsets: EndOffsets) -> str:
    try:
        status = await projection_status(engine, topic, end_offsets, MAX_WAIT_S)
    except SQLAlchemyError:
        return "unknown (the read-model database is unavailable)"
    if status.total_lag is None:
        return "unknown (the broker is unreachable)"
    return f"{status.total_lag} event(s)"


ReadAfterDep = Annotated[ReadAfter, Depends(read_after)]


async def read_query(engine: Engine, query: Callable[..., T], *args: Any) -> T:
    """Run a blocking query in a thread; a database problem is a 503, not a crash."""

    def run() -> T:
        with engine.connect() as conn:
            return query(conn, *args)

    try:
        return await asyncio.to_thread(run)
    except SQLAlchemyError as exc:
        raise _unavailable(exc) from exc


def _unavailable(exc: SQLAlchemyError) -> HTTPException:
    # The driver's message may name hosts and users: it goes to the log, not to the client.
    log.warning("read-model query failed: %s", exc)
    return HTTPException(
        503, f"the read-model database is unavailable ({type(exc).__name__}); retry later"
    )


async def row_or_404(engine: Engine, model: ReadModel[M], entity_id: str, what: str) -> M:
    """An entity's row in ``model``; 404 naming ``what`` when there is none yet."""
    row: M | None = await read_query(engine, queries.get_row, model, entity_id)
    if row is None:
        raise not_found(what)
    return row


def not_found(what: str) -> HTTPException:
    return HTTPException(
        404,
        f"{what} not found: the id is unknown, or its first event is not projected yet "
        "(pass the consistency_token of your command to wait for it)",
    )


ORDER_SAGA = saga_type(ORDERS.entity_type)

DB_DOWN = "The read-model database is unavailable"
ERRORS = documented(404, 503, 504, s503=DB_DOWN)
Id = Annotated[str, Path(min_length=1, max_length=200, pattern=TEXT)]


# --- routers ---------------------------------------------------------------------------

orders = APIRouter(prefix="/orders", tags=["orders"], route_class=StrictJsonRoute)
customers = APIRouter(prefix="/customers", tags=["customers"], route_class=StrictJsonRoute)
products = APIRouter(prefix="/products", tags=["products"], route_class=StrictJsonRoute)
sagas = APIRouter(prefix="/sagas", tags=["sagas"], route_class=StrictJsonRoute)
projections = APIRouter(prefix="/projections", tags=["projections"], route_class=StrictJsonRoute)
overview = APIRouter(prefix="/overview", tags=["sagas"], route_class=StrictJsonRoute)
ROUTERS = (sagas, projections, overview)
"""The routes about every domain; a domain's own (orders, customers, products here) are
included through its declaration (services.api.domain_routes)."""


@orders.get("/{order_id}", response_model=OrderPublic, responses=ERRORS)
async def get_order(
    order_id: Id, engine: EngineDep, watch: WatchDep, after: ReadAfterDep
) -> OrderPublic:
    """An order as projected; with ``?wait=`` it first waits for a final status."""
    await after.applied()
    if after.wait_given:  # an order's settled statuses are its final ones
        await watch.settled(ORDER_SAGA.key(order_id), after.remaining())
    return OrderPublic.of(await row_or_404(engine, ORDERS, order_id, f"order {order_id!r}"))


@customers.get("/{customer_id}/orders", response_model=CustomerOrders, responses=ERRORS)
async def customer_orders(
    customer_id: Id,
    engine: EngineDep,
    after: ReadAfterDep,
    limit: Annotated[int, Query(ge=1, le=100, description="How many orders")] = 30,
) -> CustomerOrders:
    """A customer's most recent orders, newest first."""
    await after.applied()
    # Newest first, as sagas.projections.listing.customer_history (tests compare the two).
    rows = await read_query(
        engine, queries.rows_where, ORDERS, "customer_id", customer_id, "created_at", limit
    )
    if not rows:
        raise not_found(f"orders of customer {customer_id!r}")
    return CustomerOrders(customer_id=customer_id, orders=[OrderPublic.of(r) for r in rows])


@products.get("/{product_id}/stock", response_model=StockPublic, responses=ERRORS)
async def get_stock(product_id: Id, engine: EngineDep, after: ReadAfterDep) -> StockPublic:
    """A product's stock: on hand, reserved, available."""
    await after.applied()
    what = f"stock of product {product_id!r}"
    return StockPublic.of(await row_or_404(engine, PRODUCT_STOCK, product_id, what))


TYPE_PATTERN = f"^({'|'.join(saga_list.saga_types())})$"
STATUS_PATTERN = f"^({'|'.join(sorted({x for t in SAGA_TYPES for x in t.statuses.statuses}))})$"
FilterText = Annotated[str | None, Query(min_length=1, max_length=200, pattern=TEXT)]
LIST_ERRORS = documented(422, 503, s422="A filter is wrong (the message says which and why)")


@sagas.get("", response_model=saga_list.SagaListPublic, responses=LIST_ERRORS | ERRORS)
async def list_sagas(
    engine: EngineDep,
    settings: SettingsDep,
    after_write: ReadAfterDep,
    saga_type: Annotated[
        str | None, Query(pattern=TYPE_PATTERN, description="Only sagas of this type")
    ] = None,
    status: Annotated[
        str | None,
        Query(pattern=STATUS_PATTERN, description="Only sagas in this status (their step)"),
    ] = None,
    outcome: Annotated[
        str | None,
        Query(
            pattern=f"^({'|'.join(saga_list.OUTCOMES)})$",
            description="in_flight (a step waits), stuck (in flight past a step's deadline), "
            "finished (settled, not failed), compensated (failed, a step undone), failed "
            "(failed, nothing undone)",
        ),
    ] = None,
    version: Annotated[
        int | None,
        Query(
            ge=1,
            le=saga_list.MAX_VERSION,
            description=saga_list.VERSION_FILTER,
        ),
    ] = None,
    since: Annotated[
        datetime | None, Query(description="Only sagas whose status changed at or after this")
    ] = None,
    until: Annotated[
        datetime | None, Query(description="Only sagas whose status changed before this")
    ] = None,
    customer: Annotated[FilterText, Query(description="An order's customer id")] = None,
    student: Annotated[FilterText, Query(description="An enrollment's student id")] = None,
    course: Annotated[FilterText, Query(description="An enrollment's course id (now)")] = None,
    product: Annotated[FilterText, Query(description="Sagas that touched this product")] = None,
    entity: Annotated[
        FilterText,
        Query(description="Sagas whose timeline holds this entity key (payment:o-1)"),
    ] = None,
    after: Annotated[
        str | None,
        Query(
            min_length=1,
            max_length=1000,
            pattern=r"^[A-Za-z0-9_-]+$",
            description="The `next` cursor of the previous page (same filter)",
        ),
    ] = None,
    limit: Annotated[int, Query(ge=1, le=saga_list.MAX_LIMIT, description="Sagas a page")] = 50,
) -> saga_list.SagaListPublic:
    """Every saga, most recently changed first, filtered; keyset-paged (`next` → `after`):
    no saga is skipped or repeated across pages. The console's /console/sagas, as JSON."""
    await after_write.applied()
    given = {
        "saga_type": saga_type,
        "status": status,
        "outcome": outcome,
        "version": None if version is None else str(version),
        "since": None if since is None else since.isoformat(),
        "until": None if until is None else until.isoformat(),
        "customer": customer,
        "student": student,
        "course": course,
        "product": product,
        "entity": entity,
        "after": after,
        "limit": str(limit),
    }
    try:
        wanted = saga_list.parse({k: v for k, v in given.items() if v is not None})
    except saga_list.FilterError as exc:
        raise HTTPException(422, str(exc)) from exc
    page = await read_query(
        engine, saga_list.list_sagas, wanted, datetime.now(UTC), settings.step_timeout_s
    )
    return saga_list.SagaListPublic.of(page)


@overview.get(
    "/sagas", response_model=saga_list.OverviewPublic, responses=documented(503, 504, s503=DB_DOWN)
)
async def saga_overview(
    engine: EngineDep, settings: SettingsDep, after_write: ReadAfterDep
) -> saga_list.OverviewPublic:
    """Per saga type: in flight now and stuck (past a step's deadline), the outcomes over
    the last hour and day; throughput and latency over the last hour. The console's
    overview, as JSON."""
    await after_write.applied()
    seen = await read_query(engine, saga_list.overview, datetime.now(UTC), settings.step_timeout_s)
    return saga_list.OverviewPublic.of(seen)


@sagas.get("/{saga_id}", response_model=TimelinePublic, responses=ERRORS)
async def get_timeline(saga_id: Id, engine: EngineDep, after: ReadAfterDep) -> TimelinePublic:
    """Every step of a saga, oldest first, and how it ended: why a saga ended as it did."""
    await after.applied()
    steps, saga, row = await read_query(engine, _timeline_and_status, saga_id)
    if not steps:
        raise not_found(f"saga {saga_id!r}")
    status = None if row is None or saga is None else getattr(row, saga.status_column)
    return TimelinePublic(
        saga_id=saga_id,
        saga_type=None if saga is None else saga.entity_type,
        status=status,
        reason=None if row is None or saga is None else getattr(row, saga.reason_column),
        final=saga is not None and row is not None and saga.is_final(status),
        steps=[TimelineStep.of(s) for s in steps],
    )


def _timeline_and_status(
    conn: Connection, saga_id: str
) -> tuple[list[TimelineRow], SagaType | None, BaseModel | None]:
    """The saga's steps, its type (told by its own stream among the steps: the entity whose
    id is the saga id, of a declared saga type) and its row in that type's read model."""
    steps = queries.saga_timeline(conn, saga_id)
    own = {s.entity_key for s in steps}
    saga = next((t for t in SAGA_TYPES if t.key(saga_id) in own), None)
    row = None if saga is None else queries.get_row(conn, saga.model, saga_id)
    return steps, saga, row


@projections.get(
    "/status", response_model=ProjectionStatus, responses=documented(503, s503=DB_DOWN)
)
async def get_status(
    engine: EngineDep, end_offsets: EndOffsetsDep, settings: SettingsDep
) -> ProjectionStatus:
    """Per partition: the offset applied, the end offset and the lag; held events; counters."""
    try:
        return await projection_status(
            engine, settings.topic(EVENTS), end_offsets, settings.gap_alert_s
        )
    except SQLAlchemyError as exc:
        raise _unavailable(exc) from exc
