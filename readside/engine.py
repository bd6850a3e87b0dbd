"""The read-model database engine, shared by the API, the projector and the migrations.

SQLite (the embedded default) is opened in WAL mode with a busy timeout: the API reads the
file while the projector writes it, and WAL lets readers go on during a write.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import make_url

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
