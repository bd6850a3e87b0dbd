"""Retirement: a record that can no longer change leaves the table, and a marker outlives it.

A definition that can finish declares it once, with ``is_final(state) -> bool`` (a saga in
a final status, a payment captured, declined or voided, an idle CDC key); a definition
without it (the stock, a course, a student: live entities) never retires. The machinery
(:func:`sagas.machinery.step.step`) does the rest, the same for every definition:

1. When a decision leaves the state final, the record gets the deadline
   :data:`RETIRE_DEADLINE`, ``Retirement.record`` later (a later decision that leaves it
   final keeps that deadline; one that makes it not final clears it). Until then the
   record answers late replies and repeats as before.
2. On that deadline the record is replaced by its *marker*
   (:meth:`~sagas.machinery.record.Record.marker`): the initial state, histories without
   entries, and one deadline, :data:`~sagas.machinery.record.FORGET_DEADLINE`,
   ``Retirement.marker`` later. Every message for a marked key is dropped and stores
   nothing: a redelivered or replayed command for a retired saga id starts nothing.
3. On the forget deadline the key is deleted (its marker and the history chunks its
   record had sealed): the step says ``deleted``, and the worker writes tombstones.

After that the key is unknown: a command for it is taken as new (a ``PlaceOrder`` with a
retired order id starts a new saga). That is the limit of the guarantee, like Temporal's
workflow-id reuse policy, which holds only within the namespace's retention; the README's
guarantees say so.

Why two steps and not one delete: a key's record may read history chunks, which must
outlive every record that reads them; the marker reads none, so deleting the chunks and
then the marker is safe in any prefix (:meth:`~sagas.machinery.record.Record.deletes`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from sagas.machinery.record import FORGET_DEADLINE

RETIRE_DEADLINE = "machinery.retire"
"""The deadline on which a final record is replaced by its marker. Definitions name their
own deadlines without the ``machinery.`` prefix, so neither of these reaches them."""

MACHINERY_DEADLINES = frozenset({RETIRE_DEADLINE, FORGET_DEADLINE})


@dataclass(frozen=True)
class Retirement:
    """How long a final record is kept (``record``), then its marker (``marker``); the
    defaults and their argument are the settings' (``SAGALINE_RETIRE_AFTER_S``,
    ``SAGALINE_RETIRED_MARKER_S``, in runtime/settings.py)."""

    record: timedelta
    marker: timedelta

    def __post_init__(self) -> None:
        if self.record <= timedelta(0) or self.marker <= timedelta(0):
            raise ValueError("a retirement's retentions must be positive")


def final_of(process: Any) -> Callable[[Any], bool] | None:
    """The definition's ``is_final``, or None when it declares none (it never retires)."""
    is_final = getattr(process, "is_final", None)
    return is_final if callable(is_final) else None
