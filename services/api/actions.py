"""The operator's actions over REST (scope ``admin``): a dry run of cancelling one saga or
compensating every saga a filter matches, recorded, then its execution on confirmation
(:mod:`services.operator.actions`; the console and ``sagaline sagas cancel|compensate``
do the same)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Annotated, Any

from aiokafka.errors import KafkaError
from fastapi import APIRouter, HTTPException, Request
from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy import Connection, Engine
from sqlalchemy.exc import SQLAlchemyError

from services.api.auth import caller_of
from services.api.body import StrictJsonRoute
from services.api.deps import BusDep, SettingsDep
from services.api.errors import documented
from services.api.queries import DB_DOWN, EngineDep, Id
from services.operator import actions as ops
from services.operator.cancels import NotCancellable
from services.operator.definitions import definitions

router = APIRouter(prefix="/actions", tags=["actions"], route_class=StrictJsonRoute)
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
    filter: dict[str, str] = Field(
        description="The saga list's filter (the parameters of GET /sagas but `after` and "
        "`limit`): every saga it matches whose cancel changes it"
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


ERRORS = documented(503, s503=DB_DOWN)
PLAN_ERRORS = documented(422, 503, s422="The saga or the filter is wrong (the message says why)")


async def _db(engine: Engine, work: Any, *args: Any) -> Any:
    def run() -> Any:
        with engine.connect() as conn:
            return work(conn, *args)

    try:
        return await asyncio.to_thread(run)
    except SQLAlchemyError as exc:
        raise HTTPException(503, f"the read-model database is unavailable ({exc})") from exc


async def _plan(
    request: Request, engine: Engine, settings: Any, kind: str, given: dict[str, str], why: str
) -> ActionPublic:
    who = caller_of(request).key_id

    def plan(conn: Connection) -> ops.Action:
        return ops.dry_run(
            conn, definitions(settings), kind, given, why, who, datetime.now(UTC),
            settings.step_timeout_s,
        )  # fmt: skip

    try:
        return ActionPublic.of(await _db(engine, plan))
    except (ops.ActionError, NotCancellable) as exc:
        raise HTTPException(422, str(exc)) from exc


@router.post("/cancel", status_code=201, response_model=ActionPublic, responses=PLAN_ERRORS)
async def cancel(
    request: Request, body: CancelRequest, engine: EngineDep, settings: SettingsDep
) -> ActionPublic:
    """The dry run of cancelling one saga, recorded (state `planned`): the compensations its
    definition would send. Nothing is sent until `POST /actions/{action_id}/execute`."""
    return await _plan(request, engine, settings, "cancel", {"saga_id": body.saga_id}, body.reason)


@router.post("/compensate", status_code=201, response_model=ActionPublic, responses=PLAN_ERRORS)
async def compensate(
    request: Request, body: CompensateRequest, engine: EngineDep, settings: SettingsDep
) -> ActionPublic:
    """The dry run of cancelling every saga the filter matches now, recorded: exactly the
    sagas the execution will touch (at most 10,000), each with the compensations its
    definition would send. Nothing is sent until `POST /actions/{action_id}/execute`."""
    return await _plan(request, engine, settings, "compensate", body.filter, body.reason)


@router.get("/{action_id}", response_model=ActionPublic, responses=documented(404, 503))
async def get_action(action_id: Id, engine: EngineDep) -> ActionPublic:
    """An action: who asked, when, its filter, its state and progress, saga by saga."""
    found = await _db(engine, ops.load, action_id)
    if found is None:
        raise HTTPException(404, f"no action {action_id!r}")
    return ActionPublic.of(found)


@router.post(
    "/{action_id}/execute",
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
