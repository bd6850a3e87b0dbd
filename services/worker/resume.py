"""After every assignment, each input partition resumes at the position stored in its
table, not at the group's committed offset."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import faust
from faust.types import TP

from services.worker.agents import Batched
from services.worker.faust_seam import after_seek_to_committed, changing_hands, seek_and_wait
from services.worker.positions import RESEEK_AFTER_S
from services.worker.runner import ProcessRunner

log = logging.getLogger(__name__)


def resume_from_stored_positions(
    app: faust.App, runners: Sequence[Batched], without_position: str
) -> None:
    """After every assignment Faust seeks each partition to its committed offset, once the
    tables are recovered; then seek the process topics to the positions stored in the
    tables instead, and make the runners read their positions afresh.

    A partition with no stored position has had no batch stored, ever: it starts at its
    earliest record (``without_position="earliest"``), since a committed offset there
    would be one nobody can vouch for. ``"committed"`` keeps Faust's seek: for the first
    start after upgrading from a version that stored no positions."""
    consumer = app.consumer

    async def seek_to_stored() -> None:
        for runner in runners:
            runner.positions.forget()
            if isinstance(runner, ProcessRunner):
                # Tables were just recovered: what another worker wrote meanwhile is in them.
                runner.states.clear()
        by_topic = {topic: runner for runner in runners for topic in runner.input_topics}
        offsets: dict[TP, int] = {}
        for tp in consumer.assignment():
            owner = by_topic.get(tp.topic)
            if owner is None:
                continue
            stored = owner.table.load_position(*tp)
            if stored is not None:
                offsets[tp] = stored
                log.info("%s[%d]: resuming at the stored position %d", *tp, stored)
            elif without_position == "earliest":
                # Offset 0 is out of range once retention has deleted it: the consumer's
                # auto_offset_reset (earliest) then moves to the first record there is.
                offsets[tp] = 0
                log.info("%s[%d]: no stored position; starting at the earliest record", *tp)
        # Through the consumer's method queue, all at once (faust_seam.seek_and_wait says why).
        await seek_and_wait(app, offsets)

    after_seek_to_committed(app, seek_to_stored)

    async def settle_revoked(*args: Any, **kwargs: Any) -> None:
        revoked: set[TP] = set(args[1])  # called as (sender, revoked)
        for runner in runners:
            if isinstance(runner, ProcessRunner):
                await runner.revoked(t.partition for t in revoked if t.topic == runner.topic)

    app.on_partitions_revoked.connect(settle_revoked)


def reseek_overdue_gaps(app: faust.App, runners: Sequence[Batched]) -> None:
    """Ask again, on a timer, for every seek back over a gap whose expected record has not
    come: a lost seek with no record after it would otherwise hold its partition until the
    next record arrives (services/worker/positions.py; RELIABILITY.md, defect 13). Twice
    per :data:`RESEEK_AFTER_S`, so a seek is asked again at most 1.5 times that after."""

    @app.timer(interval=RESEEK_AFTER_S / 2)  # type: ignore[untyped-decorator]
    async def reseek() -> None:
        if changing_hands(app):
            return  # the assignment that ends it seeks every partition to its stored position
        for runner in runners:
            await runner.reseek_overdue()
