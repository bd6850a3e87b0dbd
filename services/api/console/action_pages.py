"""The console's operator actions (scope ``admin``): cancel one saga from its page, or
compensate every saga the list's filter matches; each first a recorded dry run listing the
sagas and the compensations each would get, then a confirm button that runs it
(:mod:`services.operator.actions`; ``/cancellations``, ``/compensations`` and ``/actions``
over REST and ``sagaline sagas cancel|compensate`` do the same)."""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from urllib.parse import parse_qsl, urlencode

from aiokafka.errors import KafkaError
from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from sqlalchemy import Connection, Engine
from sqlalchemy.exc import SQLAlchemyError

from runtime.settings import Settings
from services.api import saga_list
from services.api.console import session
from services.api.console.routes import (
    HEADERS,
    ConsoleError,
    _checked,
    _form,
    _from_console,
    _read,
    _reader,
    _single,
    render,
)
from services.api.console.session import Visitor
from services.operator import actions as ops
from services.operator.cancels import NotCancellable
from services.operator.definitions import definitions

log = logging.getLogger(__name__)
router = APIRouter(prefix="/console", include_in_schema=False)


async def _admin(request: Request) -> tuple[Visitor, dict[str, str]]:
    """The visitor and their form, if they may act: logged in, the form the console's own,
    the ``admin`` scope."""
    who = await session.visitor(request)
    if who is None:
        raise ConsoleError(401, "Log in first: an action on sagas needs a key with 'admin'.")
    form = await _form(request)
    _from_console(request, form, who)
    if not who.may("admin"):
        raise ConsoleError(
            403, f"API key {who.key_id} has no 'admin' scope: acting on sagas needs it."
        )
    return who, form


@router.get("/actions/new", response_class=HTMLResponse)
async def new_action(request: Request) -> Response:
    """The form of a bulk compensation over the saga list's filter (the query)."""
    who = await _reader(request)
    if isinstance(who, Response):
        return who
    given = _single(request)
    try:
        wanted = saga_list.parse(given)
    except saga_list.FilterError as exc:
        raise ConsoleError(400, str(exc)) from exc
    query = wanted.query(after=None, limit=None)
    return render(
        request, "action_new.html", who, given=query, filter=urlencode(query),
        may=who.may("admin"),
    )  # fmt: skip


@router.post("/actions", response_class=HTMLResponse)
async def plan(request: Request) -> Response:
    """Record a dry run (a cancel of ``saga_id``, or a compensation over ``filter``) and
    show it."""
    who, form = await _admin(request)
    kind = form.get("kind", "")
    if kind == "cancel":
        given = {"saga_id": _checked(form.get("saga_id", ""), "saga id")}
    else:
        given = dict(parse_qsl(form.get("filter", ""), keep_blank_values=False))
    settings: Settings = request.app.state.settings
    reason = form.get("reason", "").strip()

    def dry_run(conn: Connection) -> ops.Action:
        return ops.dry_run(
            conn, definitions(settings), kind, given, reason, who.key_id, datetime.now(UTC),
            settings.step_timeout_s,
        )  # fmt: skip

    try:
        action = await _read(request, dry_run)
    except (ops.ActionError, NotCancellable) as exc:
        raise ConsoleError(422, str(exc)) from exc
    log.info("console: key %s planned action %s (%s)", who.key_id, action.action_id, kind)
    return RedirectResponse(f"/console/actions/{action.action_id}", 303, headers=HEADERS)


@router.get("/actions/{action_id}", response_class=HTMLResponse)
async def action_page(request: Request, action_id: str) -> Response:
    who = await _reader(request)
    if isinstance(who, Response):
        return who
    found = await _read(request, ops.load, _checked(action_id, "action id"))
    if found is None:
        raise ConsoleError(404, f"There is no action “{action_id[:80]}”.")
    return render(request, "action.html", who, action=found, may=who.may("admin"))


@router.post("/actions/{action_id}/execute", response_class=HTMLResponse)
async def execute(request: Request, action_id: str) -> Response:
    """Run a dry run the operator confirmed (or resume one): the cancel of each saga it
    listed, progress recorded."""
    who, _ = await _admin(request)
    action_id = _checked(action_id, "action id")
    engine: Engine = request.app.state.engine
    if await _read(request, ops.load, action_id) is None:
        raise ConsoleError(404, f"There is no action “{action_id[:80]}”.")
    settings: Settings = request.app.state.settings
    try:
        await ops.execute(
            engine, request.app.state.bus, definitions(settings), action_id, who.key_id
        )
    except KafkaError as exc:
        raise ConsoleError(
            503, f"The broker is unavailable ({exc}): run it again to resume."
        ) from exc
    except SQLAlchemyError as exc:
        raise ConsoleError(503, "The read-model database is unavailable: run it again.") from exc
    log.info("console: key %s ran action %s", who.key_id, action_id)
    return RedirectResponse(f"/console/actions/{action_id}", 303, headers=HEADERS)


def saga_actions(conn: Connection, saga_id: str) -> list[tuple[ops.Action, ops.Target]]:
    """The actions shown on a saga's page."""
    return ops.of_saga(conn, saga_id)
