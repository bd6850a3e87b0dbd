"""An operator's action on sagas, recorded: its dry run (which sagas, which compensations
each would get, :mod:`services.operator.plans`), then on confirmation its execution, saga by
saga, with its progress in the read side (:mod:`readside.operator_actions`).

What the execution sends is each listed saga's cancel command, nothing else: the
compensations are the saga's own decision on its real state. It sends to exactly the sagas
the dry run listed (the filter is not asked again), each with a message id derived from the
action id and the saga id, so sending it twice is one command to the saga (it drops a
repeated id). Progress is stored after every batch: an execution resumed after a crash of
the API, the CLI, the worker or the database sends what is left, and a repeat of what may
have been sent is dropped by the saga. A saga found final when its turn comes is skipped
(its cancel would be refused, and once the saga is retired and forgotten a cancel would
start a new one).
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any, Protocol

from sqlalchemy import Connection, Engine, func, select, update

from readside import queries
from readside.operator_actions import operator_action_sagas as targets_t
from readside.operator_actions import operator_actions as actions_t
from sagas.catalog import SAGA_TYPES
from sagas.ids import external_command_id
from sagas.machinery.versions import FIRST
from sagas.messages import Envelope
from services.api import saga_list
from services.operator.cancels import cancellation
from services.operator.definitions import SagaDefinitions
from services.operator.plans import Plan, plan_cancel

MAX_SAGAS = 10_000
"""A bulk action touches at most this many sagas: a wider filter is refused, narrow it."""
BATCH = 100
"""Cancels sent together, then recorded as sent in one transaction."""
KINDS = ("cancel", "compensate")


class ActionError(ValueError):
    """An action that cannot be planned or run; its message is a sentence."""


class Sender(Protocol):
    async def send(self, channel: str, envelope: Envelope) -> Any: ...


@dataclass(frozen=True)
class Target:
    saga_id: str
    saga_type: str
    status: str
    plan: dict[str, Any]
    message_id: str
    sent_at: datetime | None
    outcome: str | None


@dataclass(frozen=True)
class Action:
    action_id: str
    kind: str
    requested_by: str
    requested_at: datetime
    filter: dict[str, str]
    reason: str
    state: str
    planned: int
    sent: int
    confirmed_by: str | None
    confirmed_at: datetime | None
    finished_at: datetime | None
    sagas: list[Target]


def message_id(action_id: str, saga_id: str) -> str:
    """A saga's cancel in an action: the same id however often the action is run."""
    return external_command_id(f"operator-action/{action_id}", f"cancel/{saga_id}")


# --- the dry run -------------------------------------------------------------------------


def dry_run(
    conn: Connection,
    sagas: Mapping[str, SagaDefinitions],
    kind: str,
    given: Mapping[str, str],
    reason: str,
    who: str,
    now: datetime,
    step_timeout_s: float,
) -> Action:
    """Plan an action and record it (state ``planned``): ``cancel`` takes ``saga_id`` in
    ``given``; ``compensate`` a saga list filter. Only the sagas the cancel changes are
    listed (a saga already final would refuse it)."""
    if kind not in KINDS:
        raise ActionError(f"There is no action “{kind[:40]}”: choose {' or '.join(KINDS)}.")
    if not reason.strip() or len(reason) > 1000:
        raise ActionError("Say why, in 1 to 1000 characters: the reason goes to every saga.")
    found = _one(conn, given) if kind == "cancel" else _matching(conn, given, now, step_timeout_s)
    plans: list[Plan] = []
    for saga_type, saga_id, row in found:
        declared = _saga(saga_type)
        version = getattr(row, declared.version_column) or FIRST
        runs = sagas.get(saga_type)
        saga = None if runs is None else runs.runs_by(version)
        if saga is None:
            raise ActionError(
                f"No saga definition runs version {version} of the {saga_type} sagas here "
                f"(saga {saga_id}): plan with the worker's definitions."
            )
        status = str(getattr(row, declared.status_column))
        plan = plan_cancel(saga, cancellation(saga_type), saga_id, row, status, reason, now)
        if plan.touched:
            plans.append(plan)
    action_id = uuid.uuid4().hex
    conn.execute(
        actions_t.insert().values(
            action_id=action_id,
            kind=kind,
            requested_by=who,
            requested_at=now,
            filter=json.dumps(dict(given), sort_keys=True),
            reason=reason,
            state="planned",
            planned=len(plans),
            sent=0,
        )
    )
    if plans:
        conn.execute(
            targets_t.insert(),
            [
                {
                    "action_id": action_id,
                    "saga_id": p.saga_id,
                    "saga_type": p.saga_type,
                    "status": p.status,
                    "plan": json.dumps(_plan_json(p)),
                    "message_id": message_id(action_id, p.saga_id),
                }
                for p in plans
            ],
        )
    conn.commit()
    action = load(conn, action_id)
    assert action is not None
    return action


def _plan_json(plan: Plan) -> dict[str, Any]:
    return {
        "commands": [
            {
                "channel": c.channel,
                "key": c.key,
                "type": c.type,
                "certain": c.certain,
                "payload": c.payload,
                "line": c.line(),
            }
            for c in plan.commands
        ],
        "settles_in": plan.settles_in,
        "note": plan.note,
    }


def _saga(entity_type: str) -> Any:
    return next(s for s in SAGA_TYPES if s.entity_type == entity_type)


def _one(conn: Connection, given: Mapping[str, str]) -> list[tuple[str, str, Any]]:
    saga_id = (given.get("saga_id") or "").strip()
    if not saga_id or set(given) != {"saga_id"}:
        raise ActionError("A cancel names one saga: its saga_id, and nothing else.")
    for saga in SAGA_TYPES:
        row = queries.get_row(conn, saga.model, saga_id)
        if row is not None:
            return [(saga.entity_type, saga_id, row)]
    raise ActionError(f"No saga “{saga_id[:80]}” is projected (yet).")


def _matching(
    conn: Connection, given: Mapping[str, str], now: datetime, step_timeout_s: float
) -> list[tuple[str, str, Any]]:
    """Every saga the saga list's filter ``given`` matches now, every page of it."""
    if "after" in given or "limit" in given:
        raise ActionError("A bulk action takes every saga the filter matches: no after or limit.")
    try:
        wanted = saga_list.parse({**given, "limit": str(saga_list.MAX_LIMIT)})
    except saga_list.FilterError as exc:
        raise ActionError(str(exc)) from exc
    found: list[tuple[str, str, Any]] = []
    while True:
        page = saga_list.list_sagas(conn, wanted, now, step_timeout_s)
        for s in page.sagas:
            if _saga(s.saga_type).is_final(s.status):
                continue  # its cancel would be refused
            row = queries.get_row(conn, _saga(s.saga_type).model, s.saga_id)
            if row is not None:
                found.append((s.saga_type, s.saga_id, row))
        if len(found) > MAX_SAGAS:
            raise ActionError(
                f"The filter matches more than {MAX_SAGAS} sagas: narrow it (a saga type, "
                "a status, a time window)."
            )
        if page.next is None:
            return found
        wanted = replace(wanted, after=page.next)


# --- reading ---------------------------------------------------------------------------


def load(conn: Connection, action_id: str) -> Action | None:
    row = conn.execute(select(actions_t).where(actions_t.c.action_id == action_id)).first()
    if row is None:
        return None
    listed = conn.execute(
        select(targets_t).where(targets_t.c.action_id == action_id).order_by(targets_t.c.saga_id)
    )
    sagas = [
        Target(
            t.saga_id,
            t.saga_type,
            t.status,
            json.loads(t.plan),
            t.message_id,
            _utc(t.sent_at),
            t.outcome,
        )
        for t in listed
    ]
    return _action(row, sagas)


def _action(row: Any, sagas: list[Target]) -> Action:
    return Action(
        action_id=row.action_id,
        kind=row.kind,
        requested_by=row.requested_by,
        requested_at=_utc(row.requested_at) or row.requested_at,
        filter=json.loads(row.filter),
        reason=row.reason,
        state=row.state,
        planned=row.planned,
        sent=row.sent,
        confirmed_by=row.confirmed_by,
        confirmed_at=_utc(row.confirmed_at),
        finished_at=_utc(row.finished_at),
        sagas=sagas,
    )


def _utc(value: datetime | None) -> datetime | None:
    if value is None or value.tzinfo is not None:
        return value
    return value.replace(tzinfo=UTC)  # SQLite keeps no zone


def of_saga(conn: Connection, saga_id: str) -> list[tuple[Action, Target]]:
    """Every action that listed ``saga_id``, newest first, with what it planned for it."""
    query = (
        select(
            actions_t,
            targets_t.c.saga_type,
            targets_t.c.status.label("saga_status"),
            targets_t.c.plan,
            targets_t.c.message_id,
            targets_t.c.sent_at,
            targets_t.c.outcome,
        )
        .join(targets_t, targets_t.c.action_id == actions_t.c.action_id)
        .where(targets_t.c.saga_id == saga_id)
        .order_by(actions_t.c.requested_at.desc())
    )
    found = []
    for r in conn.execute(query):
        target = Target(saga_id, r.saga_type, r.saga_status, json.loads(r.plan), r.message_id,
                        _utc(r.sent_at), r.outcome)  # fmt: skip
        found.append((_action(r, []), target))
    return found


# --- the execution ---------------------------------------------------------------------


async def execute(
    engine: Engine,
    sender: Sender,
    sagas: Mapping[str, SagaDefinitions],
    action_id: str,
    who: str,
    clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    batch: int = BATCH,
    after_batch: Callable[[int], Awaitable[None]] | None = None,
) -> Action:
    """Send the cancel of every listed saga not yet done with, a batch at a time, recording
    each batch; runs again where it stopped. ``after_batch(sent so far)``: for tests."""
    action = await _in_db(engine, _confirm, action_id, who, clock())
    while True:
        todo = await _in_db(engine, _pending, action_id, batch)
        if not todo:
            break
        outcomes: dict[str, str] = {}
        sends = []
        for t in todo:
            saga_type = _saga(t.saga_type)
            status = await _in_db(engine, _status_now, saga_type, t.saga_id)
            if saga_type.is_final(status):
                # Ended by itself, or by this cancel sent before a crash (its outcome then
                # unrecorded): either way nothing more is sent.
                outcomes[t.saga_id] = f"not sent (again): already {status}"
                continue
            envelope = Envelope.wrap(
                cancellation(t.saga_type).command(action.reason),
                message_id=t.message_id,
                key=t.saga_id,
                saga_id=t.saga_id,
                occurred_at=clock(),
            )
            sends.append(sender.send(sagas[t.saga_type].name, envelope))
            outcomes[t.saga_id] = "sent"
        await asyncio.gather(*sends)
        done = await _in_db(engine, _record, action_id, outcomes, clock())
        if after_batch is not None:
            await after_batch(done)
    finished: Action = await _in_db(engine, _finish, action_id, clock())
    return finished


async def _in_db(engine: Engine, work: Callable[..., Any], *args: Any) -> Any:
    def run() -> Any:
        with engine.begin() as conn:
            return work(conn, *args)

    return await asyncio.to_thread(run)


def _confirm(conn: Connection, action_id: str, who: str, now: datetime) -> Action:
    action = load(conn, action_id)
    if action is None:
        raise ActionError(f"There is no action “{action_id[:80]}”.")
    if action.state == "planned":
        conn.execute(
            update(actions_t)
            .where(actions_t.c.action_id == action_id, actions_t.c.state == "planned")
            .values(state="running", confirmed_by=who, confirmed_at=now)
        )
    return action


def _pending(conn: Connection, action_id: str, batch: int) -> list[Any]:
    query = (
        select(targets_t)
        .where(targets_t.c.action_id == action_id, targets_t.c.sent_at.is_(None))
        .order_by(targets_t.c.saga_id)
        .limit(batch)
    )
    return list(conn.execute(query))


def _status_now(conn: Connection, saga_type: Any, saga_id: str) -> str | None:
    row = queries.get_row(conn, saga_type.model, saga_id)
    return None if row is None else str(getattr(row, saga_type.status_column))


def _record(conn: Connection, action_id: str, outcomes: Mapping[str, str], now: datetime) -> int:
    for saga_id, outcome in outcomes.items():
        conn.execute(
            update(targets_t)
            .where(targets_t.c.action_id == action_id, targets_t.c.saga_id == saga_id)
            .values(sent_at=now, outcome=outcome)
        )
    done = conn.execute(
        select(func.count())
        .select_from(targets_t)
        .where(targets_t.c.action_id == action_id, targets_t.c.sent_at.is_not(None))
    ).scalar_one()
    conn.execute(update(actions_t).where(actions_t.c.action_id == action_id).values(sent=done))
    return int(done)


def _finish(conn: Connection, action_id: str, now: datetime) -> Action:
    conn.execute(
        update(actions_t)
        .where(actions_t.c.action_id == action_id, actions_t.c.state != "done")
        .values(state="done", finished_at=now)
    )
    action = load(conn, action_id)
    assert action is not None
    return action
