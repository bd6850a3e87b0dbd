"""How a participant forgets the reservations it finished: by age, and within a size bound.

A participant remembers every reservation it closed so that a command about it that comes
again (a saga that re-sends after a crash) or late (a compensation) gets the same answer.
Remembering forever would make a hot key's record grow with its history, so entries older
than a retention are dropped; the argument for the default retention is in
:class:`sagas.machinery.reservations.Retention`. A size bound still caps a key so
hot that more than that many reservations close within the retention.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import TypeVar

from sagas.machinery.history import History
from sagas.machinery.reservations import DEFAULT_RETENTION

__all__ = ["DEFAULT_RETENTION", "epoch_seconds", "remember"]

E = TypeVar("E")


def remember(
    entries: History[E],
    rid: str,
    entry: E,
    closed_at: Callable[[E], int],
    now: datetime,
    retention: timedelta,
    window: int,
) -> History[E]:
    """``entries`` (oldest first) with ``rid`` -> ``entry`` last, less the entries closed
    before ``now - retention`` and the oldest beyond ``window``.

    Entries are kept in the order they closed, so the expired ones are a prefix: this looks
    at those and the one after, never at the whole map (a hot key holds a thousand). An
    entry of unknown age (``closed_at`` 0: stored before ages were) stops the prefix; the
    window removes those in time.
    """
    cutoff = now.timestamp() - retention.total_seconds()
    return entries.put(rid, entry).prune(lambda e: 0 < closed_at(e) < cutoff, keep=window)


def epoch_seconds(now: datetime) -> int:
    """How an entry's closing time is stored: whole seconds (a smaller record than ISO text)."""
    return int(now.timestamp())
