"""The legacy CDC correlator, stage 1: one source transaction -> its business events.

Debezium reports one legacy action ("Jhon enrolls in physics", made of a student, a course
and a link row) as up to three change events on three topics, which arrive in any order.
This process is keyed by the source transaction (:func:`correlation_key`): it collects the
transaction's row changes, dropping any it has seen (Debezium redelivers after a connector
restart; the row's position identifies it), and closes the transaction when it has all of
them (the count the transaction topic's END record gives) or when its window ends (a
durable deadline, ``SAGALINE_CDC_WINDOW_S``), whichever is first; a window that ends while
the END record says rows are owed waits another window, until the key's retention at most.
Closing classifies the rows (:func:`classify`) into the transaction's business events and
sends each, as an ``ActionPart``, to stage 2 (:mod:`sagas.definitions.legacy_actions`),
which merges the parts of an action that spanned several transactions and is the only stage
that publishes. Nothing is published here.

A transaction's rows are held in its state until it closes, up to :data:`MAX_HELD_BYTES`:
a bulk statement (``UPDATE school.student ...`` of thousands of rows) is handled in chunks,
never stored whole (see :meth:`LegacyCorrelator._row` for what a chunk yields). The
positions it remembers are a history stored in chunks beside the key's record
(:mod:`sagas.machinery.history`), so the record stays small however many rows it saw.

A row that arrives after its transaction closed (a late record beyond the window) is
classified alone and sent at once: stage 2 still merges it with the rest of its action
while that is unpublished (see there for what a later one yields). Snapshot rows
(``op: r``) are keyed by their row and yield nothing unless ``snapshot_events`` is set.

Retention: ``retention`` after a key's last message (the ``expire`` deadline) its state is
reset to empty, which is final (``is_final``): the key retires (sagas/machinery/
retirement.py). Until it retires (SAGALINE_RETIRE_AFTER_S later) the machinery's window of
message ids (``SAGALINE_SEEN_WINDOW``, 500 by default) still drops a row redelivered under
the same message id (the ingest agent derives it from the position), for any transaction
of fewer rows than that window; then its marker drops every row for the transaction
(SAGALINE_RETIRED_MARKER_S), and after that the key is deleted. A row redelivered after
that would be taken as new: a duplicate part, which stage 2 drops while it remembers its
``part_id`` (its own retention).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import ClassVar, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field

from sagas.contracts.legacy import (
    ActionPart,
    BusinessEvent,
    CourseRow,
    CourseUpdated,
    EnrollmentChanged,
    EnrollmentDropped,
    LinkRow,
    RowChanged,
    StudentEnrolled,
    StudentRow,
    StudentUpdated,
    TransactionEnded,
)
from sagas.definitions.legacy_actions import action_key
from sagas.ids import derive_id
from sagas.machinery.frozen import checked_copy
from sagas.machinery.history import History
from sagas.machinery.process import Command, Context, Decision
from sagas.messages import MAX_KEY_LENGTH, Message

WINDOW_DEADLINE = "window"
EXPIRE_DEADLINE = "expire"
MAX_POSITIONS = 10_000
"""Positions a transaction's state remembers (its rows); a legacy action has a handful."""
MAX_HELD_BYTES = 256 * 1024
"""The rows an open transaction holds, as stored (JSON), before they are sent as a chunk.

Why this size: the key's record must stay a changelog record Kafka takes (the runner's
``MAX_STATE_BYTES``, just under 1 MB; a larger one would stop the partition), and under
``SAGALINE_MAX_MESSAGE_BYTES`` (512 KiB) too. The record holds at most these 256 KiB of
rows (a chunk is sent with the row that passed them), the tails of its two histories
(positions and seen ids: fewer than 32 entries each, under 80 KB even for 400-character
positions escaped six-fold) and a few counters and deadlines: under 340 KiB, a third of the
changelog's limit. Larger chunks would buy little (a chunk is hundreds of rows: a legacy row
is ~0.5 KB, at most ~30 KB) and cost more per batch (the record is rewritten with every batch
while its transaction is open); smaller ones would split bulk actions more often."""


def correlation_key(change: RowChanged) -> str:
    """The key of the process instance that handles ``change``."""
    if change.snapshot or change.tx_id is None:
        key = f"row:{change.position}"
        # A link of two long legacy ids makes a position longer than a key may be.
        return key if len(key) <= MAX_KEY_LENGTH else f"row:{derive_id('row', change.position)}"
    return f"tx:{change.tx_id}"


def transaction_key(end: TransactionEnded) -> str:
    """The key of the process instance an END record goes to: its transaction's."""
    return f"tx:{end.tx_id}"


class TransactionState(BaseModel):
    model_config = ConfigDict(frozen=True)

    rows: tuple[RowChanged, ...] = ()
    """Rows collected while the transaction is open (since its last chunk was sent)."""
    held_bytes: int = 0
    """The size of ``rows`` as stored."""
    sent_rows: int = 0
    """Rows of the open transaction already sent in chunks."""
    positions: History[None] = Field(default_factory=History)
    """Every position processed (open or closed): the dedupe of redelivered rows. Records
    written before it was a history hold a list, read as one."""
    expected: int | None = None
    """Change events of the transaction, once its END record arrived."""
    status: Literal["empty", "open", "closed"] = "empty"


@dataclass(frozen=True)
class LegacyCorrelator:
    """Pure: ``window`` and ``retention`` come from the settings, ``now`` from the machinery;
    ``actions`` is stage 2's channel."""

    ACCEPTS: ClassVar[tuple[type[Message], ...]] = (RowChanged, TransactionEnded)
    FACTS: ClassVar[tuple[type[Message], ...]] = ()
    """Stage 1 publishes nothing: its results go to stage 2 as ``legacy.ActionPart``."""
    KEY: ClassVar[str] = "the source transaction: tx:<txId>, or row:<position> for a snapshot row"

    window: timedelta = timedelta(seconds=10)
    snapshot_events: bool = False
    actions: str = "legacy-actions"
    retention: timedelta = timedelta(hours=1)
    name: str = "legacy-tx"
    entity_type: str = "legacy"
    state_type: type[TransactionState] = TransactionState

    def initial(self, key: str) -> TransactionState:
        return TransactionState()

    def is_final(self, state: TransactionState) -> bool:
        """Idle: its ``expire`` deadline reset it (sagas/machinery/retirement.py)."""
        return state == TransactionState()

    def decide(
        self, state: TransactionState, message: Message, ctx: Context
    ) -> Decision[TransactionState]:
        match message:
            case RowChanged():
                decision = self._row(state, message, ctx)
            case TransactionEnded():
                decision = self._ended(state, message)
            case _:
                return Decision(state)
        # Every message pushes the key's retention back (see the module doc).
        expire = {**decision.set_deadlines, EXPIRE_DEADLINE: ctx.now + self.retention}
        return Decision(
            decision.state, decision.send, (), expire, decision.clear_deadlines - {EXPIRE_DEADLINE}
        )

    def on_deadline(
        self, state: TransactionState, name: str, ctx: Context
    ) -> Decision[TransactionState]:
        if name == EXPIRE_DEADLINE:
            reset = _reset(state)
            if state.status == "open":  # never before the window; closed first all the same
                closed = self._close(state)
                return Decision(reset, closed.send, (), {}, closed.clear_deadlines)
            return Decision(reset)
        if name != WINDOW_DEADLINE or state.status != "open":
            return Decision(state)
        if state.expected is not None and not _all_in(state):
            # The END record says rows are still to come: they are behind on their topics (a
            # worker catching up reads each topic at its own pace), not lost. Wait another
            # window; the ``expire`` deadline closes the transaction at the latest.
            return Decision(state, set_deadlines={WINDOW_DEADLINE: ctx.now + self.window})
        return self._close(state)

    def _row(
        self, state: TransactionState, change: RowChanged, ctx: Context
    ) -> Decision[TransactionState]:
        """Hold ``change`` in its open transaction; a transaction whose rows pass
        :data:`MAX_HELD_BYTES` sends the rows it holds as a chunk, and stays open.

        A chunk is handled as if the legacy application had committed its rows as a
        transaction of their own: classified alone, each business event sent to stage 2 as
        a part, whose id derives from the chunk's positions (the same rows replayed make the
        same chunk). Stage 2 merges what an action spread over transactions (a creation and
        its enrollment on the student's key, a course's creation through its claim), so an
        action a chunk boundary splits is still one event, within stage 2's hold. What a
        boundary can change: a row changed on both sides of it yields an event per side
        (each from its before to its after image), and a link moved whose delete and create
        fall on either side is an ``EnrollmentDropped`` and a ``StudentEnrolled``, not one
        ``EnrollmentChanged``. A bulk update of students or courses, the usual bulk
        statement, yields one event per row, whole or in chunks alike. The rest of the
        transaction closes as before: on its END record's count, or its window."""
        if change.position in state.positions:
            return Decision(state)  # redelivered
        positions = state.positions.put(change.position, None).prune(keep=MAX_POSITIONS)
        if change.snapshot:
            parts = self._parts((change,)) if self.snapshot_events else ()
            return Decision(checked_copy(state, {"positions": positions}), send=parts)
        if state.status == "closed":  # late: after the window or the END record
            late = checked_copy(state, {"positions": positions})
            return Decision(late, send=self._parts((change,)))
        opened = checked_copy(
            state,
            {
                "rows": (*state.rows, change),
                "held_bytes": state.held_bytes + _stored_size(change),
                "positions": positions,
                "status": "open",
            },
        )
        if _all_in(opened):
            return self._close(opened)
        window = {WINDOW_DEADLINE: ctx.now + self.window} if state.status == "empty" else {}
        if opened.held_bytes > MAX_HELD_BYTES:
            chunk = checked_copy(
                opened, {"rows": (), "held_bytes": 0, "sent_rows": _received(opened)}
            )
            return Decision(chunk, send=self._parts(opened.rows), set_deadlines=window)
        return Decision(opened, set_deadlines=window)

    def _ended(self, state: TransactionState, end: TransactionEnded) -> Decision[TransactionState]:
        if state.status == "closed" or state.expected is not None:
            return Decision(state)
        known = checked_copy(state, {"expected": end.event_count})
        if state.status == "open" and _all_in(known):
            return self._close(known)
        return Decision(known)

    def _close(self, state: TransactionState) -> Decision[TransactionState]:
        closed = checked_copy(
            state, {"rows": (), "held_bytes": 0, "sent_rows": 0, "status": "closed"}
        )
        return Decision(
            closed,
            send=self._parts(state.rows),
            clear_deadlines=frozenset({WINDOW_DEADLINE}),
        )

    def _parts(self, changes: tuple[RowChanged, ...]) -> tuple[Command, ...]:
        """The business events of ``changes``, each as a part for stage 2. A part's id
        derives from the rows' positions, so the same rows sent again make the same ids."""
        if not changes:
            return ()
        rows = "|".join(sorted(c.position for c in changes))
        lsn = max(c.lsn for c in changes)
        return tuple(
            Command(
                self.actions,
                action_key(event),
                ActionPart(part_id=derive_id(rows, f"part/{i}"), event=event, lsn=lsn),
            )
            for i, event in enumerate(classify(changes))
        )


def _received(state: TransactionState) -> int:
    """Rows of the open transaction processed: sent in chunks, and held."""
    return state.sent_rows + len(state.rows)


def _all_in(state: TransactionState) -> bool:
    """Every row the END record counted has been processed (False before the END record)."""
    return state.expected is not None and _received(state) >= state.expected


def _stored_size(change: RowChanged) -> int:
    """What holding ``change`` adds to the stored state: its JSON and a comma."""
    return len(change.model_dump_json()) + 1


def _reset(state: TransactionState) -> TransactionState:
    """The initial state, its positions history emptied rather than replaced: it keeps
    counting where its stored chunks are, so that they are deleted (by the key's next
    write, or with the key when it retires), not orphaned."""
    return TransactionState(positions=state.positions.prune(expired=lambda _: True))


def classify(changes: tuple[RowChanged, ...]) -> tuple[BusinessEvent, ...]:
    """The business events of the row changes of one action (any order, no duplicates)."""
    ordered = sorted(changes, key=lambda c: (c.lsn, c.position))
    tx_ids = tuple(sorted({c.tx_id for c in ordered if c.tx_id is not None}))
    students = _net_rows(ordered, "student")
    courses = _net_rows(ordered, "course")
    created: list[LinkRow] = []
    deleted: list[LinkRow] = []
    for c in ordered:
        if c.table != "student_course":
            continue
        if isinstance(c.before, LinkRow) and c.op in ("u", "d"):
            deleted.append(c.before)
        if isinstance(c.after, LinkRow) and c.op in ("c", "u", "r"):
            created.append(c.after)
    for link in [x for x in created if x in deleted]:  # deleted and re-created: no change
        created.remove(link)
        deleted.remove(link)
    events: list[BusinessEvent] = []
    involved: set[str] = set()
    involved_courses: set[str] = set()
    for new in list(created):
        old = next((d for d in deleted if d.student_id == new.student_id), None)
        if old is None:
            continue
        created.remove(new)
        deleted.remove(old)
        new_course = _typed(_after(courses.get(new.course_id)), CourseRow)
        events.append(
            EnrollmentChanged(
                student_id=new.student_id,
                from_course_id=old.course_id,
                course_id=new.course_id,
                course=new_course,
                tx_ids=tx_ids,
            )
        )
        involved.add(new.student_id)
        involved_courses.add(new.course_id)
    for link in created:
        student, course = students.get(link.student_id), courses.get(link.course_id)
        events.append(
            StudentEnrolled(
                student_id=link.student_id,
                course_id=link.course_id,
                student=_typed(_after(student), StudentRow),
                course=_typed(_after(course), CourseRow),
                student_created=student is not None and student[0] is None,
                course_created=course is not None and course[0] is None,
                tx_ids=tx_ids,
            )
        )
        involved.add(link.student_id)
        involved_courses.add(link.course_id)
    for link in deleted:
        events.append(
            EnrollmentDropped(student_id=link.student_id, course_id=link.course_id, tx_ids=tx_ids)
        )
        involved.add(link.student_id)
    for sid, (before, after) in students.items():
        if sid in involved or not isinstance(after, StudentRow):
            continue  # part of an enrollment event, or deleted (no business event defined)
        if changed := _changed(before, after):
            events.append(
                StudentUpdated(
                    student_id=sid,
                    student=after,
                    changed=changed,
                    created=before is None,
                    tx_ids=tx_ids,
                )
            )
    for cid, (before, after) in courses.items():
        if cid in involved_courses or not isinstance(after, CourseRow):
            continue
        if changed := _changed(before, after):
            events.append(
                CourseUpdated(
                    course_id=cid,
                    course=after,
                    changed=changed,
                    created=before is None,
                    tx_ids=tx_ids,
                )
            )
    return tuple(events)


Image = StudentRow | CourseRow | LinkRow | None
_R = TypeVar("_R", StudentRow, CourseRow)


def _net_rows(ordered: list[RowChanged], table: str) -> dict[str, tuple[Image, Image]]:
    """Per primary key of ``table``: (the row before the action, the row after it); the
    before of a created row is None."""
    net: dict[str, tuple[Image, Image]] = {}
    for c in ordered:
        if c.table != table:
            continue
        row_id = getattr(c.row(), "id", "")
        first_before = net[row_id][0] if row_id in net else (None if c.op == "c" else c.before)
        net[row_id] = (first_before, c.after)
    return net


def _after(pair: tuple[Image, Image] | None) -> Image:
    return None if pair is None else pair[1]


def _typed(row: Image, model: type[_R]) -> _R | None:
    return row if isinstance(row, model) else None


def _changed(before: Image, after: BaseModel) -> tuple[str, ...]:
    fields = [f for f in type(after).model_fields if f != "id"]
    if before is None:
        return tuple(fields)
    return tuple(f for f in fields if getattr(before, f) != getattr(after, f))
