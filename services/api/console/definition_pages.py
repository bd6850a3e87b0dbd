"""The console's pictures of the saga definitions: ``/console/definitions/{saga type}``,
each drawn from its declaration (:mod:`services.api.console.diagram`) with the live count
of instances at each step, read from the saga type's read model by status."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, Response
from markupsafe import Markup
from sqlalchemy import Connection

from readside import queries
from runtime.settings import Settings
from sagas.catalog import saga_type_of
from sagas.machinery.kit import Saga
from services.api.console import diagram
from services.api.console.routes import ConsoleError, _list_url, _read, _reader, render
from services.operator.definitions import definitions

router = APIRouter(prefix="/console", include_in_schema=False)


def step_statuses(saga: Saga[Any]) -> list[str]:
    """The statuses an instance waits in at a step (the ones the picture counts)."""
    found = [s.status for f in saga.FLOWS.values() for s in f.steps]
    return list(dict.fromkeys([*found, *(w for f in saga.FLOWS.values() for w in f.waits)]))


def counts(conn: Connection, entity_type: str, statuses: list[str]) -> dict[str, int]:
    saga = saga_type_of(entity_type)
    assert saga is not None
    # ``stuck_before`` only splits the count: the picture shows the whole.
    found = queries.open_counts(conn, saga, statuses, datetime.now(UTC) - timedelta(days=1))
    total: dict[str, int] = {}
    for (status, _version), (n, _old) in found.items():
        total[status] = total.get(status, 0) + n
    return total


@router.get("/definitions", response_class=HTMLResponse)
async def definitions_page(request: Request) -> Response:
    """Every saga type's definition, drawn, with its live counts."""
    return await _page(request, None)


@router.get("/definitions/{saga_type}", response_class=HTMLResponse)
async def definition_page(request: Request, saga_type: str) -> Response:
    return await _page(request, saga_type)


async def _page(request: Request, only: str | None) -> Response:
    who = await _reader(request)
    if isinstance(who, Response):
        return who
    settings: Settings = request.app.state.settings
    found = definitions(settings)
    if only is not None and only not in found:
        raise ConsoleError(
            404, f"There is no saga type “{only[:80]}”: the types are {', '.join(found)}."
        )
    pictures: list[tuple[str, Markup, int]] = []
    for kind, versions in found.items():
        if only not in (None, kind):
            continue
        saga = versions.newest
        live = await _read(request, counts, kind, step_statuses(saga))

        def link(status: str, kind: str = kind) -> str:
            return _list_url(saga_type=kind, status=status)

        pictures.append((kind, diagram.draw(saga, live, link), sum(live.values())))
    return render(request, "definitions.html", who, pictures=pictures, types=list(found), only=only)
