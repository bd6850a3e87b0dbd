"""The console's pages under ``/console``: server-rendered HTML, no script, no build step.

Reading a page needs a key with the ``read`` scope, a re-drive ``admin`` (see
:mod:`services.api.console.session` for the login cookie and the form checks). Whatever a
client sends (a search, a path, a form) is checked here, by hand rather than by FastAPI's
parameter validation, so that a wrong one is an HTML page with a sentence (4xx), never the
API's JSON error or a 500; the templates escape every value (Jinja2 autoescape).
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from importlib import resources
from typing import Any, TypeVar
from urllib.parse import parse_qs, urlencode

from fastapi import APIRouter, FastAPI, HTTPException, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from jinja2 import Environment, PackageLoader, select_autoescape
from sqlalchemy import Engine
from sqlalchemy.exc import SQLAlchemyError

from readside import queries
from runtime.kafka_security import KafkaUnreachable
from runtime.settings import Settings
from runtime.topics import DEAD_LETTERS, EVENTS
from sagas.catalog import SAGA_TYPES
from sagas.untrusted import is_digits
from services import deadletters
from services.api import saga_list
from services.api.console import charts, data, session
from services.api.console.session import Visitor
from services.api.console.sessions import SessionStore
from services.api.console.traces import trace_url
from services.deadletters import DeadLetterDesk, Desk
from services.projector.offsets import EndOffsets
from services.projector.status import projection_status

log = logging.getLogger(__name__)
T = TypeVar("T")

MAX_ID_CHARS = 200
PRINTABLE = re.compile(r"^[^\x00-\x1f\x7f]+$")
"""An id or a search is one line of text: no NUL (PostgreSQL cannot compare it), no control
characters."""
MAX_REASON_CHARS = 1000
"""As long as a saga's reason may be (the contracts' ``Reason``)."""
MAX_FORM_FIELDS = 10
MAX_OFFSET_DIGITS = 18
"""A Kafka offset is a 64-bit integer: longer digit strings are no offset."""
HEADERS = {
    # Nothing but our own style sheet and forms: an injected tag could load or run nothing.
    "Content-Security-Policy": "default-src 'none'; style-src 'self'; img-src 'self'; "
    "form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
    "X-Content-Type-Options": "nosniff",
    # Not "no-referrer": Chromium then sends "Origin: null" with our own forms, which the
    # origin check would refuse. Same-origin keeps URLs (ids) from leaving the console.
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
    "X-Frame-Options": "DENY",
}

templates = Environment(
    loader=PackageLoader("services.api.console", "templates"),
    autoescape=select_autoescape(["html"], default=True),
    trim_blocks=True,
    lstrip_blocks=True,
)

router = APIRouter(prefix="/console", include_in_schema=False)


class ConsoleError(Exception):
    """A request the console refuses: rendered as a page with this status and sentence."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def install(app: FastAPI) -> None:
    """The console's routes, its sessions and the dead-letter desk, and its refusals
    rendered as pages (not the API's JSON). Tests replace the state's parts with fakes."""
    settings: Settings = app.state.settings
    app.state.console_sessions = SessionStore.from_settings(settings)
    app.state.dead_letter_desk = DeadLetterDesk(settings)
    from services.api.console import action_pages, definition_pages  # use these helpers

    app.include_router(definition_pages.router)  # before this router's catch-all
    app.include_router(action_pages.router)
    app.include_router(router)
    app.add_exception_handler(ConsoleError, _refused)  # type: ignore[arg-type]


# --- rendering -----------------------------------------------------------------------


def _ago(value: timedelta | None) -> str:
    if value is None:
        return "—"
    seconds = value.total_seconds()
    if seconds < 1:
        return f"+{seconds * 1000:.0f} ms"
    if seconds < 120:
        return f"+{seconds:.1f} s"
    return f"+{int(seconds // 60)} min {int(seconds % 60)} s"


def _when(value: datetime | None) -> str:
    return "—" if value is None else value.strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + " UTC"


templates.filters["ago"] = _ago
templates.filters["when"] = _when


def render(
    request: Request,
    name: str,
    visitor: Visitor | None,
    code: int = 200,
    **context: Any,
) -> HTMLResponse:
    page = templates.get_template(name).render(
        visitor=visitor,
        auth=request.app.state.access.keyring is not None,
        path=request.url.path,
        **context,
    )
    return HTMLResponse(page, status_code=code, headers=HEADERS)


async def _refused(request: Request, exc: ConsoleError) -> HTMLResponse:
    who = await session.visitor(request)
    return render(request, "error.html", who, exc.status, status=exc.status, message=exc.message)


# --- who, and what they sent -----------------------------------------------------------


async def _reader(request: Request) -> Visitor | Response:
    """The visitor, if they may read; else where to go (the login page)."""
    who = await session.visitor(request)
    if who is None:
        return RedirectResponse("/console/login", status_code=303, headers=HEADERS)
    if not who.may("read"):
        raise ConsoleError(
            403, f"API key {who.key_id} has no 'read' scope: the console needs a key with it."
        )
    return who


def _checked(text: str, what: str) -> str:
    if not text.strip():
        raise ConsoleError(400, f"The {what} is empty: type an id.")
    if len(text) > MAX_ID_CHARS:
        raise ConsoleError(400, f"The {what} is longer than {MAX_ID_CHARS} characters.")
    if not PRINTABLE.match(text):
        raise ConsoleError(400, f"The {what} holds control characters; an id has none.")
    return text.strip()


async def _form(request: Request) -> dict[str, str]:
    """A urlencoded form (the only kind the console's pages send), one value per field."""
    media = (request.headers.get("content-type") or "").split(";")[0].strip().lower()
    if media != "application/x-www-form-urlencoded":
        raise ConsoleError(415, "The console takes its own forms only (urlencoded).")
    try:
        fields = parse_qs(
            (await request.body()).decode("utf-8"),
            keep_blank_values=True,
            strict_parsing=False,
            max_num_fields=MAX_FORM_FIELDS,
            errors="strict",
        )
    except (UnicodeDecodeError, ValueError) as exc:
        raise ConsoleError(
            400, "The form could not be read (not UTF-8, or too many fields)."
        ) from exc
    return {name: values[0] for name, values in fields.items()}


def _from_console(request: Request, form: dict[str, str], who: Visitor) -> None:
    """Refuse a form another site made the browser send."""
    if not session.same_origin(request) or not session.token_matches(
        who.form_token, form.get("form_token")
    ):
        raise ConsoleError(
            403,
            "This form did not come from this console's own page (its token or origin is "
            "wrong). Open the page again and resend it.",
        )


# --- the read side and the broker ------------------------------------------------------


def _state(request: Request, name: str) -> Any:
    value = getattr(request.app.state, name, None)
    if value is None:
        raise ConsoleError(503, "This API process has no read-model database.")
    return value


async def _read(request: Request, query: Callable[..., T], *args: Any) -> T:
    engine: Engine = _state(request, "engine")

    def run() -> T:
        with engine.connect() as conn:
            return query(conn, *args)

    try:
        return await asyncio.to_thread(run)
    except SQLAlchemyError as exc:
        log.warning("console query failed: %s", exc)
        raise ConsoleError(
            503, f"The read-model database is unavailable ({type(exc).__name__}); retry later."
        ) from exc


async def _kafka(work: Any) -> Any:
    try:
        return await work
    except KafkaUnreachable as exc:
        raise ConsoleError(503, f"The broker is unavailable: {exc}") from exc


# --- pages -----------------------------------------------------------------------------


@router.get("", response_class=HTMLResponse)
async def home(request: Request) -> Response:
    """Search, the projection's lag and the last rebuild."""
    who = await _reader(request)
    if isinstance(who, Response):
        return who
    settings: Settings = request.app.state.settings
    engine: Engine = _state(request, "engine")
    end_offsets: EndOffsets = _state(request, "end_offsets")
    try:
        status = await projection_status(
            engine, settings.topic(EVENTS), end_offsets, settings.gap_alert_s
        )
    except SQLAlchemyError as exc:
        raise ConsoleError(503, "The read-model database is unavailable; retry later.") from exc
    history = await _read(request, queries.rebuild_history)
    now = datetime.now(UTC)
    seen = await _read(request, saga_list.overview, now, settings.step_timeout_s)
    # The same reading as /metrics' sagaline_sagas_in_flight (None: this process has none).
    in_flight = getattr(request.app.state, "in_flight", None)
    versions = None if in_flight is None else await in_flight.current()
    return render(
        request,
        "home.html",
        who,
        versions=versions,
        refresh_s=settings.in_flight_refresh_s,
        projection=status,
        rebuild=history.swapped,
        history=history,
        overview=seen,
        types=saga_list.saga_types(),
        throughput=charts.throughput(seen.buckets, saga_list.saga_types()),
        latency=charts.latency(seen.buckets),
        list_url=_list_url,
    )


def _list_url(**params: object) -> str:
    """A link to the saga list filtered by ``params`` (None values left out)."""
    given = {k: _param(v) for k, v in params.items() if v is not None}
    return "/console/sagas" + (f"?{urlencode(given)}" if given else "")


def _param(value: object) -> str:
    if isinstance(value, datetime):
        return value.astimezone(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
    return str(value)


@router.get("/sagas", response_class=HTMLResponse)
async def sagas(request: Request) -> Response:
    """Every saga, filtered by the query's parameters, newest change first, keyset-paged."""
    who = await _reader(request)
    if isinstance(who, Response):
        return who
    settings: Settings = request.app.state.settings
    params = _single(request)
    try:
        wanted = saga_list.parse(params)
    except saga_list.FilterError as exc:
        raise ConsoleError(400, str(exc)) from exc
    now = datetime.now(UTC)
    page = await _read(request, saga_list.list_sagas, wanted, now, settings.step_timeout_s)
    next_url = None
    if page.next is not None:
        next_url = "/console/sagas?" + urlencode(wanted.query(after=page.next.encode()))
    return render(
        request,
        "sagas.html",
        who,
        page=page,
        wanted=wanted,
        next_url=next_url,
        first_url=_list_url(**wanted.query()) if wanted.after is not None else None,
        types=saga_list.saga_types(),
        statuses=_all_statuses(),
        outcomes=saga_list.OUTCOMES,
        id_filters=list(saga_list.ID_FILTERS),
        touch_filters=list(saga_list.TOUCH_FILTERS),
        step_timeout_s=settings.step_timeout_s,
        list_url=_list_url,
    )


def _single(request: Request) -> dict[str, str]:
    """The query's parameters, each given once (a repeated one is refused: which would
    count is a guess)."""
    items = request.query_params.multi_items()
    names = [k for k, _v in items]
    repeated = sorted({k for k in names if names.count(k) > 1})
    if repeated:
        raise ConsoleError(400, f"The filter “{repeated[0][:40]}” is given twice: give it once.")
    return dict(items)


def _all_statuses() -> list[str]:
    return list(dict.fromkeys(x for s in SAGA_TYPES for x in s.statuses.statuses))


@router.get("/search", response_class=HTMLResponse)
async def search(request: Request) -> Response:
    who = await _reader(request)
    if isinstance(who, Response):
        return who
    text = _checked(request.query_params.get("q", ""), "search")
    exact, found = await _read(request, data.search, text)
    if exact is not None:
        return RedirectResponse(_saga_url(request, exact.saga_id), 303, headers=HEADERS)
    if not found:
        raise ConsoleError(
            404,
            f"Nothing found for “{text}”: no {' or '.join(data.saga_types())} has that id, "
            f"and no saga has it as its {', '.join(data.searched_columns())}. Check the id, "
            "or wait for the projector to catch up.",
        )
    return render(request, "search.html", who, q=text, found=found)


def _saga_url(request: Request, saga_id: str) -> str:
    return str(request.url_for("saga", saga_id=saga_id).path)


@router.get("/sagas/{saga_id}", response_class=HTMLResponse, name="saga")
async def saga(request: Request, saga_id: str) -> Response:
    """A saga's timeline (compensations marked) and its current read-model row."""
    who = await _reader(request)
    if isinstance(who, Response):
        return who
    saga_id = _checked(saga_id, "saga id")
    page = await _read(request, data.saga_page, saga_id)
    if page is None:
        raise ConsoleError(404, f"No saga “{saga_id}” is projected (yet).")
    kind = page.saga.entity_type if page.saga else None
    from services.api.console.action_pages import saga_actions

    return render(
        request,
        "saga.html",
        who,
        page=page,
        actions=await _read(request, saga_actions, saga_id),
        trace_url=trace_url(request.app.state.settings, saga_id, [s.at for s in page.steps]),
        lanes=charts.lanes(page.steps, kind),
        swimlanes=charts.swimlanes(page.steps, kind),
    )


@router.get("/failures", response_class=HTMLResponse)
async def failures(request: Request) -> Response:
    """Recent sagas in a failed status, by type and reason."""
    who = await _reader(request)
    if isinstance(who, Response):
        return who
    kind = request.query_params.get("saga_type") or None
    if kind is not None and kind not in data.saga_types():
        raise ConsoleError(400, f"There is no saga type “{kind[:80]}”: choose one of the list.")
    reason = request.query_params.get("reason") or None
    if reason is not None and (len(reason) > MAX_REASON_CHARS or not PRINTABLE.match(reason)):
        raise ConsoleError(400, "The reason filter is too long or holds control characters.")
    found = await _read(request, data.failures, kind, reason)
    return render(
        request,
        "failures.html",
        who,
        failures=found,
        saga_type=kind,
        reason=reason,
        saga_types=data.saga_types(),
    )


@router.get("/deadletters", response_class=HTMLResponse)
async def dead_letters(request: Request) -> Response:
    """A page of dead letters, newest first; ``?before=<offset>`` for older ones."""
    who = await _reader(request)
    if isinstance(who, Response):
        return who
    before = _offset(request.query_params.get("before"), "before")
    return await _letters_page(request, who, before)


def _offset(text: str | None, what: str) -> int | None:
    """An offset a page or form sent: digits, or nothing."""
    if text is None or text == "":
        return None
    if not is_digits(text) or len(text) > MAX_OFFSET_DIGITS:
        raise ConsoleError(400, f"The {what} offset must be a whole number, like 120.")
    return int(text)


def _desk(request: Request) -> Desk:
    desk: Desk = request.app.state.dead_letter_desk
    return desk


async def _letters_page(
    request: Request,
    who: Visitor,
    before: int | None,
    status: int = 200,
    result: str = "",
    ok: bool = True,
) -> HTMLResponse:
    settings: Settings = request.app.state.settings
    size = settings.console_deadletters_page
    page, done = await _kafka(deadletters.letter_page(_desk(request), settings, before, size))
    return render(
        request,
        "deadletters.html",
        who,
        status,
        letters=data.letter_views(page.letters, done, deadletters.redrive_topics(settings)),
        page=page,
        page_size=size,
        topic=settings.topic(DEAD_LETTERS),
        result=result,
        ok=ok,
    )


@router.post("/deadletters/{letter_offset}/redrive", response_class=HTMLResponse)
async def redrive(request: Request, letter_offset: str) -> Response:
    """Re-send a letter's original record, as ``sagaline deadletters redrive`` does, to one
    of Sagaline's process channels only: a second re-drive of the same record is refused
    unless the form asks to force it."""
    who = await session.visitor(request)
    if who is None:
        raise ConsoleError(401, "Log in first: re-driving needs a key with the 'admin' scope.")
    form = await _form(request)
    _from_console(request, form, who)
    if not who.may("admin"):
        raise ConsoleError(
            403, f"API key {who.key_id} has no 'admin' scope: re-driving a letter needs it."
        )
    if not is_digits(letter_offset) or len(letter_offset) > MAX_OFFSET_DIGITS:
        raise ConsoleError(404, "There is no dead letter at that offset.")
    before = _offset(form.get("before"), "page's")
    try:
        message = await _redrive(request, int(letter_offset), force=form.get("force") == "yes")
    except _Refused as refused:
        return await _letters_page(request, who, before, refused.status, refused.message, False)
    log.info("console: key %s %s", who.key_id, message)
    return await _letters_page(request, who, before, result=message)


class _Refused(ConsoleError):
    """A re-drive refused: said at the top of the dead-letter page it was asked from."""


async def _redrive(request: Request, letter_offset: int, force: bool) -> str:
    """Re-drive the letter; what was done, as a sentence. :class:`_Refused` says why not."""
    settings: Settings = request.app.state.settings
    try:
        done = await _kafka(
            deadletters.redrive(_desk(request), settings, letter_offset, force=force)
        )
    except deadletters.NoLetter as exc:
        raise ConsoleError(404, f"There is no dead letter at offset {letter_offset}.") from exc
    except deadletters.ForeignTopic as exc:
        raise _Refused(422, f"Refused: {exc}.") from exc
    except deadletters.RedriveRefused as exc:
        raise _Refused(409, f"Refused: {exc}.") from exc
    again = " again (forced)" if done.forced else ""
    return (
        f"Re-drove letter {letter_offset} ({done.source}){again} to partition "
        f"{done.partition}, offset {done.offset}."
    )


# --- logging in and out ----------------------------------------------------------------


@router.get("/login", response_class=HTMLResponse)
async def login_page(request: Request) -> Response:
    return _login_form(request, await session.visitor(request))


def _login_form(
    request: Request, who: Visitor | None, status: int = 200, message: str = ""
) -> HTMLResponse:
    settings: Settings = request.app.state.settings
    idle = round(settings.console_session_idle_s / 60)
    return render(request, "login.html", who, status, message=message, idle_minutes=idle)


@router.post("/login", response_class=HTMLResponse)
async def login(request: Request) -> Response:
    if not session.same_origin(request):
        raise ConsoleError(403, "This login form did not come from this console's own page.")
    if request.app.state.access.keyring is None:
        return RedirectResponse("/console", status_code=303, headers=HEADERS)
    if session.insecure_origin(request):
        return _login_refused(request, 400, INSECURE_LOGIN)
    form = await _form(request)
    key = form.get("api_key", "").strip()
    address = request.client.host if request.client else "unknown"
    try:
        found = await session.authenticate(request.app.state.access, key, address)
    except HTTPException as refused:  # the key checks' 429
        return _login_refused(request, refused.status_code, str(refused.detail))
    if found is None:
        return _login_refused(
            request, 401, "That API key is not valid here (unknown, revoked or mistyped)."
        )
    key_id, scopes = found
    if "read" not in scopes:
        return _login_refused(
            request, 403, f"API key {key_id} has no 'read' scope: the console needs a key with it."
        )
    response = RedirectResponse("/console", status_code=303, headers=HEADERS)
    try:
        await session.start(response, request, key_id, scopes)
    except OSError as exc:
        log.error("console: cannot store a session: %s", exc)
        return _login_refused(
            request,
            503,
            "This API cannot store console sessions (SAGALINE_CONSOLE_SESSIONS_DIR is not "
            "writable); its operator must fix that before anyone can log in.",
        )
    return response


INSECURE_LOGIN = (
    "This page was opened over plain http from another machine, and the console's cookie "
    "is sent over https only, so the browser would drop it: open the console over https "
    "(a proxy that ends TLS), or set SAGALINE_CONSOLE_COOKIE_SECURE=false on a private test "
    "network."
)


def _login_refused(request: Request, status: int, message: str) -> HTMLResponse:
    return _login_form(request, None, status, message)


@router.post("/logout", response_class=HTMLResponse)
async def logout(request: Request) -> Response:
    who = await session.visitor(request)
    if who is not None:
        _from_console(request, await _form(request), who)
    response = RedirectResponse("/console/login", status_code=303, headers=HEADERS)
    session.end(response, request)
    return response


@router.get("/console.css", include_in_schema=False)
async def style() -> Response:
    css = resources.files("services.api.console").joinpath("templates/console.css").read_text()
    return Response(css, media_type="text/css", headers={"Cache-Control": "max-age=300"})


@router.api_route("/{rest:path}", methods=["GET", "HEAD"], response_class=HTMLResponse)
async def unknown(request: Request, rest: str) -> Response:
    if rest == "":  # /console/ is the overview too
        return RedirectResponse("/console", status_code=308, headers=HEADERS)
    raise ConsoleError(404, "There is no such console page. The links above lead to every page.")
