"""How far the projector is: applied offsets (database) beside end offsets (broker)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

from sqlalchemy import Engine

from readside import queries
from services.api.public import PartitionStatus, ProjectionStatus
from services.projector.offsets import EndOffsets


async def projection_status(
    engine: Engine, topic: str, end_offsets: EndOffsets, gap_alert_s: float
) -> ProjectionStatus:
    applied, held, counters = await asyncio.to_thread(_read, engine, topic)
    ends = await end_offsets.get(topic)
    partitions = []
    for p in sorted(set(applied) | set(ends or {})):
        end = None if ends is None else ends.get(p)
        at = applied.get(p, 0)
        partitions.append(
            PartitionStatus(
                partition=p,
                applied_offset=at,
                end_offset=end,
                lag=None if end is None else max(end - at, 0),
            )
        )
    lags = [p.lag for p in partitions]
    total_lag = None if any(lag is None for lag in lags) else sum(lag or 0 for lag in lags)
    alert_before = datetime.now(UTC) - timedelta(seconds=gap_alert_s)
    return ProjectionStatus(
        topic=topic,
        partitions=partitions,
        total_lag=total_lag,
        held_events=held.count,
        oldest_held_since=held.oldest_since,
        gap_alert=held.oldest_since is not None and held.oldest_since < alert_before,
        counters=counters,
    )


def _read(engine: Engine, topic: str) -> tuple[dict[int, int], queries.Held, dict[str, int]]:
    with engine.connect() as conn:
        return (
            queries.checkpoints(conn, topic),
            queries.held_events(conn),
            queries.counters(conn),
        )
