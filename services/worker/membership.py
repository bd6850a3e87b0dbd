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
:class:`MembershipInDoubt` before anything of it is stored, and is retried, or left when
its partition has moved or partitions are changing hands
(``services.worker.agents.handle_until_done``).

A freeze is not the only way to lose the partitions without knowing it: a broker down for
longer than the session timeout expires every session, and the first worker back is given
everything while the others still hold their old assignment (a stalled loop or a network
cut would do the same). The group tells such a member at its next heartbeat ("member_id
was not recognized"), and aiokafka resets its member id; but Faust's revocation then waits
for the batch already taken from the stream, which went on to decide and write after the
new owner had recovered those partitions (RELIABILITY.md, defect 6: index entries the new
owner's store never read). So the guard also asks whether the group still knows this
member (``member``): once it did not, every write is refused until an assignment
completes.

Records queued before a freeze wait in the producer (for the request ahead of them on the
connection, or for the sender's next turn of the loop) and, without more, go out as the
process thaws, before any check: the new owner, which recovered their partition while this
one was frozen, never reads them, and the changelog holds a write its store lacks (the
harness found that: RELIABILITY.md, defect 8). So the producer checks again as it puts each
request on the wire (:meth:`Membership.confirm_before_transmit`, by
``faust_seam.guard_produce_requests``): in doubt, the process exits without sending it.

What is left: a freeze between that check and the socket's write (the same turn of the
loop, no await between them), and an expulsion this member has not heard of yet (the group
has reassigned, its next heartbeat has not been answered). A table write
checks again once its changelog records are acknowledged
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
        member: Callable[[], bool] = lambda: True,
    ) -> None:
        self.session_timeout_s = session_timeout_s
        self.freeze_s = session_timeout_s / 2
        self._rebalancing = rebalancing
        self._clock = clock
        self._member = member
        """Whether the group coordinator still knows this process's consumer
        (``faust_seam.group_member``)."""
        self._last_tick: float | None = None
        self._doubt_since: float | None = None
        self._expelled = False
        """The group did not know this member at some point since the last completed
        assignment: only the next one ends it (a new member id alone does not: it holds
        no partition until then)."""
        self.refused = 0
        """Writes refused so far (a metric for operators: each is a frozen process)."""

    def tick(self) -> None:
        """Called every :data:`TICK_S` by the worker's ticker task."""
        now = self._clock()
        self._note_freeze(now)
        self._note_expulsion()
        self._last_tick = now

    def assigned(self) -> None:
        """An assignment has completed: its tables recovered, its partitions sought."""
        self._doubt_since = None
        self._expelled = False

    @property
    def in_doubt(self) -> bool:
        return self._doubt_since is not None or self._expelled

    def check(self) -> None:
        """Raise :class:`MembershipInDoubt` while this process may be a zombie."""
        now = self._clock()
        self._note_freeze(now)
        self._note_expulsion()
        if self._expelled:
            self.refused += 1
            raise MembershipInDoubt(
                "this worker's consumer is no longer a member of its group (its session "
                "expired: the broker unreachable or the process stalled for longer than the "
                "session timeout), so its partitions may be another worker's: it writes "
                "nothing until its next assignment completes"
            )
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
        self._exit_in_doubt("exiting before storing an acknowledged table write")

    def confirm_before_transmit(self) -> None:
        """Called as the producer puts a request of records on the wire. Every send is
        checked as it is queued, so records reach this in doubt only when they were queued
        before the freeze or the expulsion began: sent now, they would land after the new
        owner recovered their partition (RELIABILITY.md, defect 8). In doubt, exit now."""
        self._exit_in_doubt("exiting before sending records queued before a freeze or an expulsion")

    def _exit_in_doubt(self, what: str) -> None:
        try:
            self.check()
        except MembershipInDoubt as doubt:
            log.critical("%s: %s", what, doubt)
            logging.shutdown()
            os._exit(EXIT_IN_DOUBT)

    def _note_expulsion(self) -> None:
        if not self._expelled and not self._member():
            self._expelled = True

    def _note_freeze(self, now: float) -> None:
        if self._last_tick is not None and now - self._last_tick > self.freeze_s:
            if self._doubt_since is None:
                self._doubt_since = now
            self._last_tick = now  # one freeze, noted once
