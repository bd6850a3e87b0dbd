"""A rebuild that fails leaves a row in ``rebuild_failures`` saying when, where and why, so
the projector's metrics and the console can tell a failed last attempt from a swapped one
(``rebuild_runs`` holds those). Written only by a run that held the rebuild lock: a run
refused because another one is running is not a failure of the models.

A process killed outright (SIGKILL, the machine lost) records nothing: the swap's age in
the metrics is what catches that.
"""

from __future__ import annotations

import logging
import uuid
from datetime import UTC, datetime

from sqlalchemy import Engine, insert
from sqlalchemy.exc import SQLAlchemyError

from spark_projections import tables

log = logging.getLogger(__name__)

MAX_ERROR_CHARS = 1000


def describe(exc: BaseException) -> str:
    """The error's type and first line of message, bounded (a Spark error can be pages)."""
    message = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    text = f"{type(exc).__name__}: {message}" if message else type(exc).__name__
    return text if len(text) <= MAX_ERROR_CHARS else text[: MAX_ERROR_CHARS - 1] + "…"


def record(
    engine: Engine, topic: str, started_at: datetime, stage: str, exc: BaseException
) -> None:
    """Add the failed run's row. Never raises: the failure itself is what the caller reports
    (a database that is down, say, is often why the rebuild failed)."""
    try:
        with engine.begin() as conn:
            conn.execute(
                insert(tables.rebuild_failures).values(
                    run_id=str(uuid.uuid4()),
                    topic=topic,
                    started_at=started_at,
                    failed_at=datetime.now(UTC),
                    stage=stage[:40],
                    error=describe(exc),
                )
            )
    except SQLAlchemyError as problem:
        log.warning("could not record the failed rebuild in rebuild_failures: %s", problem)
