"""Whether this process may still write for the partitions it was assigned.

A worker frozen for longer than the consumer-group session timeout (a stop signal, a VM
paused, a swap storm) has lost its partitions to another worker by the time it runs again,
but it does not know it yet: Faust's consumer learns it at its next heartbeat, and until its
rebalance starts the agents go on deciding the records they had fetched, on the states they
had cached, and write outputs and changelog records beside the new owner's. The fault
harness with three workers found exactly that (RELIABILITY.md, "A worker thawed after its
session expired"): two owners of one product, two events with one sequence number, and a
store that skipped the new owner's changelog records.

Kafka itself fences such a zombie only with transactions (a producer epoch per
``transactional.id``). Without them this guard narrows the zombie's window to the moment of
one write: every send and every table write first asks :meth:`Membership.check`, which
refuses while a freeze longer than half the session timeout is in doubt. The freeze is seen
as a gap in a ticker that runs every :data:`TICK_S` on the event loop (a frozen process's
clock jumps; its loop did not turn). The doubt ends when an assignment completes after it
(the group has placed the partitions again and the tables were recovered), or when a whole
session timeout has passed after it without a rebalance (the group did not expel this
member: its heartbeat after the freeze was answered). A refused batch raises
:class:`MembershipInDoubt` before anything of it is stored, and is retried, or dropped when
its partition has moved (``services.worker.agents.handle_until_done``).

What is left: a freeze that falls inside one write, after its check and before its records
reach the broker. A table write checks again once its changelog records are acknowledged
(:meth:`Membership.confirm_after_write`): in doubt then, the process exits at once without
storing them. Storing them could skip the new owner's records that landed before them; not
storing them and going on would let the next write's persisted offset skip them (the CI of
721b282 found that: 554 keys of a store unlike its changelog). A restart recovers each
partition from its changelog from the persisted offset, which holds both.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable

TICK_S = 0.25
"""How often the ticker turns: 4 wake-ups a second, a freeze of more than half the session
timeout (3 s at the least, SAGALINE_SESSION_TIMEOUT_S >= 6) is seen well above it."""


EXIT_IN_DOUBT = 75
"""The worker's exit status when it stops itself in doubt (EX_TEMPFAIL: start it again)."""

log = logging.getLogger(__name__)


class MembershipInDoubt(RuntimeError):
    """A write refused while a freeze of this process may have cost it its partitions."""


class Membership:
    def __init__(
        self,
        session_timeout_s: float,
        rebalancing: Callable[[], bool] = lambda: False,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.session_timeout_s = session_timeout_s
        self.freeze_s = session_timeout_s / 2
        self._rebalancing = rebalancing
        self._clock = clock
        self._last_tick: float | None = None
        self._doubt_since: float | None = None
        self.refused = 0
        """Writes refused so far (a metric for operators: each is a frozen process)."""

    def tick(self) -> None:
        """Called every :data:`TICK_S` by the worker's ticker task."""
        now = self._clock()
        self._note_freeze(now)
        self._last_tick = now

    def assigned(self) -> None:
        """An assignment has completed: its tables recovered, its partitions sought."""
        self._doubt_since = None

    @property
    def in_doubt(self) -> bool:
        return self._doubt_since is not None

    def check(self) -> None:
        """Raise :class:`MembershipInDoubt` while this process may be a zombie."""
        now = self._clock()
        self._note_freeze(now)
        if self._doubt_since is None:
            return
        if now - self._doubt_since > self.session_timeout_s and not self._rebalancing():
            self._doubt_since = None  # a session went by and the group kept this member
            return
        self.refused += 1
        raise MembershipInDoubt(
            f"this worker was frozen for more than {self.freeze_s:g} s (half the session "
            "timeout), so the group may have given its partitions to another worker: it "
            "writes nothing until an assignment completes or a session timeout passes "
            "without one"
        )

    def confirm_after_write(self) -> None:
        """Called once a table write's changelog records are acknowledged, before they are
        stored locally: in doubt, exit the process now (a crash, which the worker recovers
        from) rather than store them or leave them unstored behind a later write."""
        try:
            self.check()
        except MembershipInDoubt as doubt:
            log.critical("exiting before storing an acknowledged table write: %s", doubt)
            logging.shutdown()
            os._exit(EXIT_IN_DOUBT)

    def _note_freeze(self, now: float) -> None:
        if self._last_tick is not None and now - self._last_tick > self.freeze_s:
            if self._doubt_since is None:
                self._doubt_since = now
            self._last_tick = now  # one freeze, noted once
