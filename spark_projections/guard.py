"""One rebuild at a time per read-model database.

Two rebuilds would share the staging tables: one could swap in the other's half-filled
tables. PostgreSQL: a session advisory lock, held on its own connection for the whole run
(it is released if the process dies). SQLite: an exclusive ``flock`` on a file next to the
database (also released by the kernel when the process dies).
"""

from __future__ import annotations

import fcntl
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from sqlalchemy import Engine, func, select
from sqlalchemy.engine import make_url

LOCK_KEY = zlib.crc32(b"sagaline-rebuild")


class AlreadyRunning(RuntimeError):
    """Another rebuild holds the lock of this database."""


@contextmanager
def exclusive(engine: Engine) -> Iterator[None]:
    if engine.dialect.name == "postgresql":
        with _advisory_lock(engine):
            yield
        return
    with _file_lock(_lock_file(engine)):
        yield


@contextmanager
def _advisory_lock(engine: Engine) -> Iterator[None]:
    with engine.connect() as conn:
        if not conn.execute(select(func.pg_try_advisory_lock(LOCK_KEY))).scalar_one():
            raise AlreadyRunning("another rebuild is running against this database")
        conn.commit()
        try:
            yield
        finally:
            conn.execute(select(func.pg_advisory_unlock(LOCK_KEY)))
            conn.commit()


def _lock_file(engine: Engine) -> Path:
    database = make_url(str(engine.url)).database or "sagaline.db"
    return Path(f"{database}.rebuild.lock")


@contextmanager
def _file_lock(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise AlreadyRunning(f"another rebuild holds {path}") from None
        yield
