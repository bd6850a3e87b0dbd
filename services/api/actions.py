"""The operator's actions over REST (scope ``admin``): a dry run of cancelling one saga
(``POST /cancellations``) or compensating every saga a filter matches (``POST
/compensations``), recorded as an action (``GET /actions/{action_id}``), then its execution
on confirmation (``POST /actions/{action_id}/execute``) (:mod:`services.operator.actions`;
the console and ``sagaline sagas cancel|compensate`` do the same).

The creation routes are not under ``/actions``: ``POST /actions/cancel`` would share its
path with ``GET /actions/{action_id}``, and the answer to ``OPTIONS`` would name both."""

from __future__ import annotations

import asyncio
import re
from datetime import UTC, datetime
from typing import Annotated, Any

from aiokafka.errors import KafkaError
from fastapi import APIRouter, HTTPException, Request, Response
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field
from sqlalchemy import Connection, Engine
from sqlalchemy.exc import SQLAlchemyError

from services.api import saga_list
from services.api.auth import caller_of
from services.api.body import StrictJsonRoute
from services.api.deps import BusDep, SettingsDep
from services.api.errors import documented
from services.api.queries import STATUS_PATTERN, TYPE_PATTERN, EngineDep, Id
from services.operator import actions as ops
from services.operator.cancels import NotCancellable
from services.operator.definitions import definitions

router = APIRouter(tags=["actions"], route_class=StrictJsonRoute)
TAGS = [
    {
        "name": "actions",
        "description": "An operator's cancel of one saga or compensation of every saga a "
        "filter matches: a recorded dry run first, then its execution on confirmation "
        "(scope `admin`)",
    }
]
Reason = Annotated[
    str,
    Field(min_length=1, max_length=1000, description="Why: sent to every saga as its reason"),
]


class CancelRequest(BaseModel):
    model_config = ConfigDict(
        extra="forbid", json_schema_extra={"examples": [{"saga_id": "o-1", "reason": "fraud"}]}
    )
    saga_id: str = Field(min_length=1, max_length=200, description="The saga to cancel")
    reason: Reason


RFC3339 = re.compile(r"^\d{4}-\d{2}-\d{2}[Tt]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})$")


def _rfc3339(value: object) -> object:
    """A time in a JSON body is a string, a date and a time with its offset (the schema's
    ``date-time``): not a number of seconds, not a bare date."""
    if isinstance(value, str) and RFC3339.match(value):
        return value
    if value is None:
        return None
    raise ValueError("must be a date and time with its offset, like 2026-11-25T14:00:00Z")


Time = Annotated[datetime | None, BeforeValidator(_rfc3339)]
Text = Annotated[
    str | None,
    Field(min_length=1, max_length=saga_list.MAX_TEXT, pattern=saga_list.PRINTABLE.pattern),
]


class SagaFilterBody(BaseModel):
    """The saga list's filter: the parameters of GET /sagas but `after` and `limit` (each
    optional; none matches every saga). Some combinations are refused with a 422 saying why
    (the operation's `x-rules`)."""

    model_config = ConfigDict(extra="forbid")
    saga_type: Annotated[
        str | None, Field(pattern=TYPE_PATTERN, description="Only sagas of this type")
    ] = None
    status: Annotated[
        str | None,
        Field(pattern=STATUS_PATTERN, description="Only sagas in this status (their step)"),
    ] = None
    outcome: Annotated[
        str | None,
        Field(
            pattern=f"^({'|'.join(saga_list.OUTCOMES)})$",
            description="in_flight, stuck, finished, compensated or failed (as GET /sagas)",
        ),
    ] = None
    version: Annotated[
        int | None,
        Field(
            ge=1,
            le=saga_list.MAX_VERSION,
            description=saga_list.VERSION_FILTER,
        ),
    ] = None
    since: Annotated[
        Time, Field(description="Only sagas whose status changed at or after this")
    ] = None
    until: Annotated[Time, Field(description="Only sagas whose status changed before this")] = None
    customer: Annotated[Text, Field(description="An order's customer id")] = None
    student: Annotated[Text, Field(description="An enrollment's student id")] = None
    course: Annotated[Text, Field(description="An enrollment's course id (now)")] = None
    product: Annotated[Text, Field(description="Sagas that touched this product")] = None
    account: Annotated[Text, Field(description="Sagas that touched this account")] = None
    entity: Annotated[
        str | None,
        Field(
            min_length=3,
            max_length=saga_list.MAX_TEXT,
            pattern=r"^[^\x00-\x1f\x7f:]+:[^\x00-\x1f\x7f]+$",
            description="Sagas whose timeline holds this entity key: its type, a colon and "
            "its id (payment:o-1)",
        ),
    ] = None

    def given(self) -> dict[str, str]:
        """As the saga list's parameters (text, by name)."""
        return {
            name: value.isoformat() if isinstance(value, datetime) else str(value)
            for name, value in self
            if value is not None
        }


class CompensateRequest(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [
                {
                    "filter": {"saga_type": "order", "status": "AUTHORIZING"},
                    "reason": "payment provider outage",
                }
            ]
        },
    )
    filter: SagaFilterBody = Field(
        description="Every saga it matches now whose cancel changes it (an empty filter "
        "matches every saga)"
    )
    reason: Reason


class PlannedCommandPublic(BaseModel):
    channel: str = Field(description="The participant's channel (its topic's name)")
    key: str
    type: str
    certain: bool = Field(
        description="False: sent only if the saga's step got that far (a status several "
        "steps share)"
    )
    payload: dict[str, Any]


class ActionSagaPublic(BaseModel):
    saga_id: str
    saga_type: str
    status: str = Field(description="Its status at the dry run")
    compensations: list[PlannedCommandPublic] = Field(
        description="What its definition sends on its cancel, computed by the definition"
    )
    settles_in: str | None = Field(
        description="Its status after the cancel (null: the saga decides)"
    )
    note: str
    message_id: str = Field(description="Its cancel's message id, derived from both ids")
    sent_at: datetime | None = Field(description="When its cancel was sent (null: not yet)")
    outcome: str | None = Field(description="sent, or why it was not")


class ActionPublic(BaseModel):
    action_id: str
    kind: str = Field(description="cancel (one saga) or compensate (a filter)")
    requested_by: str = Field(description="The API key id that asked for the dry run")
    requested_at: datetime
    filter: dict[str, str]
    reason: str
    state: str = Field(description="planned (a dry run), running or done")
    planned: int = Field(description="The sagas it touches")
    sent: int = Field(description="Of which done with: the progress")
    confirmed_by: str | None
    confirmed_at: datetime | None
    finished_at: datetime | None
    sagas: list[ActionSagaPublic]

    @classmethod
    def of(cls, action: ops.Action) -> ActionPublic:
        fields = {k: v for k, v in action.__dict__.items() if k != "sagas"}
        return cls(
            **fields,
            sagas=[
                ActionSagaPublic(
                    saga_id=t.saga_id,
                    saga_type=t.saga_type,
                    status=t.status,
                    compensations=[PlannedCommandPublic(**c) for c in t.plan["commands"]],
                    settles_in=t.plan["settles_in"],
                    note=t.plan["note"],
                    message_id=t.message_id,
                    sent_at=t.sent_at,
                    outcome=t.outcome,
                )
                for t in action.sagas
            ],
        )


PLAN_RESPONSES = documented(
    400, 415, 422, 503, s422="The saga or the filter is wrong (the message says why)"
) | {
    201: {
        "description": "The dry run, recorded as an action (state `planned`)",
        "headers": {
            "Location": {
                "description": "The action: `/actions/{action_id}`",
                "required": True,
                "schema": {"type": "string"},
            }
        },
    }
}


async def _db(engine: Engine, work: Any, *args: Any) -> Any:
    def run() -> Any:
        with engine.connect() as conn:
            return work(conn, *args)

    try:
        return await asyncio.to_thread(run)
    except SQLAlchemyError as exc:
        raise HTTPException(503, f"the read-model database is unavailable ({exc})") from exc


async def _plan(
    request: Request,
    response: Response,
    engine: Engine,
    settings: Any,
    kind: str,
    given: dict[str, str],
    why: str,
) -> ActionPublic:
    who = caller_of(request).key_id

    def plan(conn: Connection) -> ops.Action:
        return ops.dry_run(
            conn, definitions(settings), kind, given, why, who, datetime.now(UTC),
            settings.step_timeout_s,
        )  # fmt: skip

    try:
        action = ActionPublic.of(await _db(engine, plan))
    except (ops.ActionError, NotCancellable) as exc:
        raise HTTPException(422, str(exc)) from exc
    response.headers["Location"] = f"/actions/{action.action_id}"
    return action


CANCEL_RULES = [
    "saga_id must name a saga the read model holds (else 422)",
    "its saga type must declare a cancel command (else 422)",
]
COMPENSATE_RULES = [
    "customer is about order sagas, student and course about enrollment sagas: "
    "with another saga_type, or with each other, 422",
    "status must be one of a saga type the filter allows, and within outcome (else 422)",
    "since must be before until (else 422)",
    "at most one of product, account and entity (else 422)",
    f"the filter matches at most {ops.MAX_SAGAS} sagas (else 422: narrow it)",
    "every saga it matches is of a type that declares a cancel command (else 422)",
]
"""What the schema cannot state (``x-rules`` in the document): a request it allows may be
refused by one, with a 422 saying which."""


@router.post(
    "/cancellations",
    status_code=201,
    response_model=ActionPublic,
    responses=PLAN_RESPONSES,
    openapi_extra={"x-rules": CANCEL_RULES},
)
async def cancel(
    request: Request,
    response: Response,
    body: CancelRequest,
    engine: EngineDep,
    settings: SettingsDep,
) -> ActionPublic:
    """The dry run of cancelling one saga, recorded as an action (state `planned`): the
    compensations its definition would send. Nothing is sent until
    `POST /actions/{action_id}/execute`."""
    given = {"saga_id": body.saga_id}
    return await _plan(request, response, engine, settings, "cancel", given, body.reason)


@router.post(
    "/compensations",
    status_code=201,
    response_model=ActionPublic,
    responses=PLAN_RESPONSES,
    openapi_extra={"x-rules": COMPENSATE_RULES},
)
async def compensate(
    request: Request,
    response: Response,
    body: CompensateRequest,
    engine: EngineDep,
    settings: SettingsDep,
) -> ActionPublic:
    """The dry run of cancelling every saga the filter matches now, recorded as an action:
    exactly the sagas the execution will touch (at most 10,000), each with the compensations
    its definition would send. Nothing is sent until `POST /actions/{action_id}/execute`."""
    given = body.filter.given()
    return await _plan(request, response, engine, settings, "compensate", given, body.reason)


@router.get("/actions/{action_id}", response_model=ActionPublic, responses=documented(404, 503))
async def get_action(action_id: Id, engine: EngineDep) -> ActionPublic:
    """An action: who asked, when, its filter, its state and progress, saga by saga."""
    found = await _db(engine, ops.load, action_id)
    if found is None:
        raise HTTPException(404, f"no action {action_id!r}")
    return ActionPublic.of(found)


@router.post(
    "/actions/{action_id}/execute",
    response_model=ActionPublic,
    responses=documented(404, 503, s503="The broker or the read-model database is unavailable"),
)
async def execute(
    request: Request, action_id: Id, engine: EngineDep, bus: BusDep, settings: SettingsDep
) -> ActionPublic:
    """Confirm a dry run and send each listed saga its cancel, recording the progress; run
    it again to resume after a failure: nothing is sent twice under two ids, and a finished
    action sends nothing."""
    if await _db(engine, ops.load, action_id) is None:
        raise HTTPException(404, f"no action {action_id!r}")
    who = caller_of(request).key_id
    try:
        done = await ops.execute(engine, bus, definitions(settings), action_id, who)
    except KafkaError as exc:
        raise HTTPException(503, f"the message broker is unavailable, retry ({exc})") from exc
    except SQLAlchemyError as exc:
        raise HTTPException(503, f"the read-model database is unavailable ({exc})") from exc
    return ActionPublic.of(done)
