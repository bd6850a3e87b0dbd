"""One reservation primitive for participants: hold, commit, release or refuse an amount.

A participant that guards an amount (a product's stock, a course's seats, a student's
credits, an account's balance) keeps a :class:`Reservations` value and maps its contract's
commands onto its methods; each returns the new value and an :class:`Outcome` that the
participant turns into its reply. Amounts are ``int`` or ``Decimal`` (one per value).

The life of one reservation id::

    (unknown) --hold--> held --commit--> confirmed --release--> refunded
                        held --commit, keep_open--> committed --release--> refunded
                        held --release--> cancelled
                        held --its TTL passes--> expired
              --hold, with less available; or refuse (a rule of the caller's)--> rejected
              --release, before any hold--> tombstone

A commit either consumes the amount (a sale, a payment: it leaves ``on_hand`` and the
reservation closes as ``confirmed``) or keeps it open as ``committed`` (a seat, an
enrollment's credits: counted against what is available for as long as it lasts, however
long, until a release gives it back). ``held`` and ``committed`` are the open states. Every
other state is closed, and a closed id is remembered so that a command about it that comes
again (a saga re-sending after a crash) or late (a compensation) is answered as it was the
first time and changes nothing; a release that overtook its hold leaves a tombstone, so the
hold that arrives later is refused instead of holding for a saga that has given up. Closed
ids are remembered for a :class:`Retention` (an age and a count): past it a repeat is
answered ``unknown``; why ten minutes is safe for the participants here is argued in
:class:`Retention`.

Totals: ``on_hand`` is what is not consumed (stock on hand, a balance, a capacity); a
consuming commit takes the amount out of it and its refund puts it back, and
:meth:`Reservations.receive` puts more on hand (a credit); ``available = on_hand - held -
committed``. So for any sequence, ``available + held + committed + consumed`` is what was
put on hand (the conservation the unit tests check). A TTL is optional (``None``: a hold
never expires by itself); the value reads no clock: ``now`` is passed in, and
:meth:`Reservations.expire` closes what is due.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any, Generic, Literal, NamedTuple, Self, TypeVar

from pydantic import BaseModel, ConfigDict, Field

from sagas.machinery.frozen import checked_copy
from sagas.machinery.history import History

A = TypeVar("A", int, Decimal)
"""The amount's type: whole units, or money."""

Ending = Literal["confirmed", "rejected", "cancelled", "expired", "refunded", "tombstone"]
"""How a reservation closed."""

Kind = Literal["held", "committed", "unknown"] | Ending
"""What an :class:`Outcome` says of a reservation: open (held, committed), closed as, or
never seen (or forgotten past the retention)."""

DEFAULT_RETENTION = timedelta(minutes=10)
"""SAGALINE_DEDUPE_RETENTION_S's default (the argument is on :class:`Retention`)."""


@dataclass(frozen=True)
class Retention:
    """How long closed reservations are remembered: ``period``, and never more than
    ``window`` of them.

    Why ten minutes is safe: a closed reservation is remembered to answer a command about
    it that comes again or late. The machinery's ``seen`` window drops exact repeats of
    recent messages; what reaches a participant is a command re-sent by its saga (a saga
    worker that crashed before it stored its batch re-decides and re-sends, so the repeat
    comes after the worker's restart) or a compensation. A saga waits on a step for at most
    its step timeout (30 s by default) and then compensates, and a hold it made lives at
    most the reservation TTL (5 minutes). Forgetting an entry is harmless for a repeated
    commit (refused; the saga is past that step and ignores it) and for a repeated release
    (a tombstone); a repeated hold would place a new hold, which the saga's compensation or
    the TTL releases: availability dips, nothing is sold twice. The one entry whose loss
    costs stock is a consumed commit that a saga releases (capture refused or timed out): that
    release is sent within a step timeout of the commit. Ten minutes is twenty step
    timeouts and twice the TTL, the margin for a worker restart or a backlog in between.
    ``window`` bounds the size first on a key hotter than ``window`` closes per period
    (1000 per 10 minutes: 1.7/s): there the horizon is ``window`` closes, and above ~33
    closes/s it is shorter than a step timeout. The entries are stored in chunks written
    once (:mod:`sagas.machinery.history`), so the window bounds what a key holds in memory
    and reads back after a restart (a full window is ~32 chunks), not every write.
    """

    period: timedelta = DEFAULT_RETENTION
    window: int = 1000


class Closed(NamedTuple, Generic[A]):
    """A closed reservation. A tuple, stored as a JSON array (``["confirmed", 1, 1763..., ""]``):
    a hot key holds a thousand of these, so they are kept small."""

    outcome: Ending
    amount: A
    at: int = 0
    """When it closed, in whole seconds since the epoch (0: unknown, stored before ages)."""
    note: str = ""
    """The caller's words for it (a refusal's reason), to answer a repeat with them."""


class Hold(BaseModel, Generic[A]):
    """An open reservation, and whom to tell if it ends by itself (its TTL)."""

    model_config = ConfigDict(frozen=True)
    amount: A
    expires_at: datetime | None = None
    saga_id: str | None = None
    reply_to: str | None = None


@dataclass(frozen=True)
class Outcome(Generic[A]):
    """What became of one reservation after an operation, for the participant's reply."""

    rid: str
    kind: Kind
    amount: A | None = None
    """The reservation's amount (None when ``unknown``)."""
    repeat: bool = False
    """Answered from what was recorded before: the operation changed nothing."""
    hold: Hold[A] | None = None
    """The hold, when ``held`` or when the operation closed one."""
    note: str = ""
    """A closed reservation's note (see :attr:`Closed.note`)."""


class Reservations(BaseModel, Generic[A]):
    """The reservations of one key and its totals. Immutable: every operation returns a new
    value (of the caller's subclass) and its outcome."""

    model_config = ConfigDict(frozen=True)
    on_hand: A
    holds: dict[str, Hold[A]] = {}
    committed: dict[str, A] = {}
    """Commitments kept open, in the order made: id -> amount."""
    closed: History[Closed[A]] = Field(default_factory=History)
    """Closed reservations, oldest closed first, kept for a :class:`Retention`."""

    @property
    def held(self) -> A:
        return sum((h.amount for h in self.holds.values()), self._zero)

    @property
    def committed_total(self) -> A:
        return sum(self.committed.values(), self._zero)

    @property
    def available(self) -> A:
        return self.on_hand - self.held - self.committed_total

    @property
    def _zero(self) -> A:
        # on_hand's zero: a Decimal value's totals are Decimals even when nothing is summed.
        return self.on_hand - self.on_hand

    # --- reading ---------------------------------------------------------------------

    def status(self, rid: str) -> Outcome[A]:
        """What was answered about ``rid``: the answer to a repeated command."""
        if (hold := self.holds.get(rid)) is not None:
            return Outcome(rid, "held", hold.amount, repeat=True, hold=hold)
        if (amount := self.committed.get(rid)) is not None:
            return Outcome(rid, "committed", amount, repeat=True)
        if (closed := self.closed.get(rid)) is not None:
            return Outcome(rid, closed.outcome, closed.amount, repeat=True, note=closed.note)
        return Outcome(rid, "unknown", repeat=True)

    def knows(self, rid: str) -> bool:
        return rid in self.holds or rid in self.committed or rid in self.closed

    # --- operations ------------------------------------------------------------------

    def hold(
        self,
        rid: str,
        amount: A,
        now: datetime,
        keep: Retention,
        *,
        ttl: timedelta | None = None,
        saga_id: str | None = None,
        reply_to: str | None = None,
        short: str = "",
    ) -> tuple[Self, Outcome[A]]:
        """Hold ``amount`` for ``rid`` (until ``now + ttl``, or until released), or reject it
        when less is available, noting ``short``. A known ``rid`` is answered as before."""
        if amount < 0:
            raise ValueError(f"a hold of {amount} for {rid}: amounts are never negative")
        if self.knows(rid):
            return self, self.status(rid)
        if self.available < amount:
            return self.refuse(rid, amount, now, keep, note=short)
        expires_at = None if ttl is None else now + ttl
        hold = Hold[A](amount=amount, expires_at=expires_at, saga_id=saga_id, reply_to=reply_to)
        new = checked_copy(self, {"holds": {**self.holds, rid: hold}})
        return new, Outcome(rid, "held", amount, hold=hold)

    def refuse(
        self, rid: str, amount: A, now: datetime, keep: Retention, note: str = ""
    ) -> tuple[Self, Outcome[A]]:
        """Close ``rid`` as rejected (by a rule of the caller's, said in ``note``), so a
        repeat is answered the same. A known ``rid`` is answered as before."""
        if self.knows(rid):
            return self, self.status(rid)
        new = self._close(rid, Closed(outcome="rejected", amount=amount, note=note), now, keep)
        return new, Outcome(rid, "rejected", amount, note=note)

    def commit(
        self,
        rid: str,
        now: datetime,
        keep: Retention,
        *,
        keep_open: bool = False,
        amount: A | None = None,
    ) -> tuple[Self, Outcome[A]]:
        """Confirm ``rid``'s hold: its amount leaves ``on_hand`` (``confirmed``), or, with
        ``keep_open``, stays counted as ``committed`` until released. ``amount`` commits
        another amount than was held (the difference comes from, or goes back to, what is
        available). Anything but an open hold is answered as before."""
        hold = self.holds.get(rid)
        if hold is None:
            return self, self.status(rid)
        amount = hold.amount if amount is None else amount
        if not 0 <= amount <= hold.amount + self.available:
            raise ValueError(f"{rid}: {amount} cannot be committed on a hold of {hold.amount}")
        holds = {k: v for k, v in self.holds.items() if k != rid}
        if keep_open:
            committed = {**self.committed, rid: amount}
            kept = checked_copy(self, {"holds": holds, "committed": committed})
            return kept, Outcome(rid, "committed", amount, hold=hold)
        spent = checked_copy(self, {"on_hand": self.on_hand - amount})
        new = spent._close(rid, Closed("confirmed", amount), now, keep)
        return new, Outcome(rid, "confirmed", amount, hold=hold)

    def release(
        self, rid: str, now: datetime, keep: Retention, note: str = ""
    ) -> tuple[Self, Outcome[A]]:
        """Give ``rid`` back: a hold is cancelled, a commitment refunded (a consumed one, while
        remembered, returns to ``on_hand``), ``note`` kept with it. An unknown ``rid`` leaves
        a tombstone; anything else closed is answered as before."""
        if (hold := self.holds.get(rid)) is not None:
            new = self._close(rid, Closed("cancelled", hold.amount, note=note), now, keep)
            return new, Outcome(rid, "cancelled", hold.amount, hold=hold, note=note)
        if (amount := self.committed.get(rid)) is not None:
            new = self._close(rid, Closed("refunded", amount, note=note), now, keep)
            return new, Outcome(rid, "refunded", amount, note=note)
        closed = self.closed.get(rid)
        if closed is not None and closed.outcome == "confirmed":
            back = checked_copy(self, {"on_hand": self.on_hand + closed.amount})
            new = back._close(rid, Closed("refunded", closed.amount, note=note), now, keep)
            return new, Outcome(rid, "refunded", closed.amount, note=note)
        if closed is not None:
            return self, self.status(rid)
        tombstone = Closed("tombstone", self._zero, note=note)
        return self._close(rid, tombstone, now, keep), Outcome(
            rid, "tombstone", self._zero, note=note
        )

    def due(self, now: datetime) -> tuple[str, ...]:
        """The holds whose TTL has passed at ``now``, the earliest first."""
        expiring = {
            rid: hold.expires_at
            for rid, hold in self.holds.items()
            if hold.expires_at is not None and hold.expires_at <= now
        }
        return tuple(sorted(expiring, key=expiring.__getitem__))

    def lapse(self, rid: str, now: datetime, keep: Retention) -> tuple[Self, Outcome[A]]:
        """Close ``rid``'s hold as expired (its TTL passed); anything else is answered as
        before. :meth:`expire` does this for every hold :meth:`due`."""
        if (hold := self.holds.get(rid)) is None:
            return self, self.status(rid)
        new = self._close(rid, Closed("expired", hold.amount), now, keep)
        return new, Outcome(rid, "expired", hold.amount, hold=hold)

    def expire(self, now: datetime, keep: Retention) -> tuple[Self, tuple[Outcome[A], ...]]:
        """Close every hold whose TTL has passed at ``now``, the earliest first."""
        new, outcomes = self, []
        for rid in self.due(now):
            new, outcome = new.lapse(rid, now, keep)
            outcomes.append(outcome)
        return new, tuple(outcomes)

    def restock(self, on_hand: A) -> Self | None:
        """This value with ``on_hand`` set, or None if that is below what is held and
        committed."""
        if on_hand < self.held + self.committed_total:
            return None
        return checked_copy(self, {"on_hand": on_hand})

    def receive(self, amount: A) -> Self:
        """This value with ``amount`` more on hand (money credited, stock delivered): what is
        available grows by it."""
        if amount < 0:
            raise ValueError(f"{amount} received: amounts are never negative")
        return checked_copy(self, {"on_hand": self.on_hand + amount})

    def forget(self, now: datetime, keep: Retention) -> Self:
        """Drop the closed reservations past ``keep`` at ``now`` (every close does this too;
        a participant whose key may go quiet calls it from a deadline at :meth:`forgets_at`)."""
        return checked_copy(self, {"closed": _pruned(self.closed, now, keep)})

    def forgets_at(self, keep: Retention) -> datetime | None:
        """When the oldest remembered reservation passes the retention (None: nothing to
        forget by age)."""
        for closed in self.closed.values():
            if closed.at > 0:
                return datetime.fromtimestamp(closed.at, tz=UTC) + keep.period
        return None

    # --- closing ---------------------------------------------------------------------

    def _close(self, rid: str, closed: Closed[A], now: datetime, keep: Retention) -> Self:
        """This value with ``rid`` closed now (remembered last), less what is past ``keep``."""
        history = self.closed.put(rid, closed._replace(at=epoch_seconds(now)))
        update: dict[str, Any] = {"closed": _pruned(history, now, keep)}
        if rid in self.holds:
            update["holds"] = {k: v for k, v in self.holds.items() if k != rid}
        if rid in self.committed:
            update["committed"] = {k: v for k, v in self.committed.items() if k != rid}
        return checked_copy(self, update)


def _pruned(closed: History[Closed[A]], now: datetime, keep: Retention) -> History[Closed[A]]:
    """``closed`` less the entries closed before ``now - keep.period`` and the oldest past
    ``keep.window``. Entries are in the order they closed, so the old ones are a prefix: this
    looks at those and the one after, never at the whole map (a hot key holds a thousand).
    An entry of unknown age (``at`` 0: stored before ages were) stops the prefix; the window
    removes those in time."""
    cutoff = now.timestamp() - keep.period.total_seconds()
    return closed.prune(lambda entry: 0 < entry.at < cutoff, keep=keep.window)


def epoch_seconds(now: datetime) -> int:
    """How a closing time is stored: whole seconds (a smaller record than ISO text)."""
    return int(now.timestamp())
