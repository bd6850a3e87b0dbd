"""The read-model database engine, shared by the API, the projector and the migrations.

SQLite (the embedded default) is opened in WAL mode with a busy timeout: the API reads the
file while the projector writes it, and WAL lets readers go on during a write.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import make_url
from sqlalchemy.exc import OperationalError

from runtime.startup_wait import Unreachable

T = TypeVar("T")

SQLITE_BUSY_TIMEOUT_MS = 10_000


def create_read_engine(url: str, **kwargs: Any) -> Engine:
    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite":
        return create_engine(url, pool_pre_ping=True, **kwargs)
    if parsed.database and parsed.database != ":memory:":
        Path(parsed.database).parent.mkdir(parents=True, exist_ok=True)
    engine = create_engine(url, **kwargs)
    event.listen(engine, "connect", _sqlite_pragmas)
    return engine


def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    try:
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
        # NORMAL in WAL mode survives process crashes; a power loss may drop the last
        # commits, but their offsets go with them, so the projector simply replays them.
        cursor.execute("PRAGMA synchronous=NORMAL")
    finally:
        cursor.close()


class DatabaseUnreachable(Unreachable):
    """The read-model database could not be used: where, and what it answered."""

    WAIT_SETTING = "SAGALINE_DATABASE_STARTUP_WAIT_S"


STARTING_OR_STOPPING = "the database system is"
"""PostgreSQL's refusals while it starts, stops or recovers ("... is starting up"): it will
answer soon, so these are waited out like silence."""


def answering(engine: Engine, probe: Callable[[Engine], T]) -> T:
    """``probe(engine)``, a failure to connect turned into :class:`DatabaseUnreachable`."""
    try:
        return probe(engine)
    except OperationalError as exc:
        where = engine.url.render_as_string(hide_password=True)
        raise unreachable(where, exc, sqlite=engine.dialect.name == "sqlite") from exc


def unreachable(where: str, exc: OperationalError, *, sqlite: bool) -> DatabaseUnreachable:
    """Why the database at ``where`` (its URL, password masked) could not be used: silent
    when no server answered (refused, unresolved, timed out) or PostgreSQL is starting or
    stopping; a refusal otherwise (a login, a missing database). SQLite's file either opens
    or will not, so its failures are refusals."""
    reason = str(exc.orig or exc).strip().splitlines()[0]
    server_said = "FATAL:" in reason and STARTING_OR_STOPPING not in reason
    return DatabaseUnreachable(
        f"cannot use the read-model database at {where}: {reason}",
        silent=not sqlite and not server_said,
    )
