"""Apply one message to one key: the only function agents call."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from sagas.contracts.system import Tick
from sagas.ids import derive_id
from sagas.machinery.frozen import checked_copy
from sagas.machinery.process import Command, Context, Decision, Fact, Outbound, Process
from sagas.machinery.record import FORGET_DEADLINE, Record
from sagas.machinery.retirement import RETIRE_DEADLINE, Retirement, final_of
from sagas.machinery.versions import pinned, started_version
from sagas.messages import Envelope, Message

EVENTS_CHANNEL = "events"
DEFAULT_SEEN_WINDOW = 500


@dataclass(frozen=True)
class StepResult:
    record: Record[Any]
    outbound: tuple[Outbound, ...]
    duplicate: bool = False
    """The message was processed before (its id is in the key's window): nothing to do."""
    unchanged: bool = False
    """Nothing to store: a message for a retired key (dropped), or one that changed nothing
    about a key the table does not hold (a stray reply)."""
    deleted: bool = False
    """The key is forgotten (a retired key's marker expired): delete it from the table."""

    @property
    def changed(self) -> bool:
        return not (self.duplicate or self.unchanged)

    @property
    def retired(self) -> bool:
        """The key is retired: the message was dropped for that."""
        return self.unchanged and self.record.retired_at is not None


def step(
    process: Process[Any],
    record: Record[Any] | None,
    envelope: Envelope,
    now: datetime,
    seen_window: int = DEFAULT_SEEN_WINDOW,
    retirement: Retirement | None = None,
) -> StepResult:
    """Decide on ``envelope`` for its key and return the new record and what to send.

    With ``retirement``, a definition that declares ``is_final`` retires its final records
    (:mod:`sagas.machinery.retirement`); without it nothing retires.

    Raises :class:`~sagas.messages.ContractError` when the payload breaks its contract.
    """
    key = envelope.key
    known = record is not None
    if record is None:
        codec = Record.codec(process.state_type)
        record = codec(state=process.initial(key), version=started_version(process))
    process, record = pinned(process, record)  # the version the key started on decides
    if record.retired_at is not None:
        return _retired(record, envelope, now)
    if envelope.message_id in record.seen:
        return StepResult(record, (), duplicate=True)
    message = envelope.message()
    if isinstance(message, Tick):
        result = _fire_deadlines(process, record, key, now, retirement)
    else:
        ctx = Context(
            key=key,
            now=now,
            cause_id=envelope.message_id,
            saga_id=envelope.saga_id,
            reply_to=envelope.reply_to,
        )
        decision = process.decide(record.state, message, ctx)
        seen = record.seen.put(envelope.message_id, None).prune(keep=seen_window)
        result = _apply(process, record, decision, ctx, {"seen": seen})
    if not known and _changes_nothing(process, key, result):
        return StepResult(record, result.outbound, unchanged=True)
    if result.deleted or retirement is None:
        return result
    return _retire_when_final(process, result, retirement, now)


def _changes_nothing(process: Process[Any], key: str, result: StepResult) -> bool:
    """A key the table does not hold stays out of it when the decision leaves its state
    the initial one, sets no deadline and publishes no fact (which would number the key's
    events): a stray reply, or a command refused (its refusal is still sent; deciding it
    again sends the same one, under the same id, so its message id need not be
    remembered). Storing it would keep a record that never becomes final, never retires."""
    new = result.record
    if new.deadlines or new.state != process.initial(key):
        return False
    return not any(out.channel == EVENTS_CHANNEL for out in result.outbound)


def _retired(record: Record[Any], envelope: Envelope, now: datetime) -> StepResult:
    """A retired key drops every message; its marker's own deadline deletes it."""
    forget = record.deadlines.get(FORGET_DEADLINE)
    if forget is not None and forget <= now and envelope.type == Tick.TYPE:
        return StepResult(record, (), deleted=True)
    return StepResult(record, (), unchanged=True)


def _retire_when_final(
    process: Process[Any], result: StepResult, retirement: Retirement, now: datetime
) -> StepResult:
    """Give a record that became final its retirement deadline (or take it from one that
    is final no more)."""
    is_final = final_of(process)
    record = result.record
    if is_final is None or record.retired_at is not None:
        return result
    deadlines = record.deadlines
    if is_final(record.state):
        if RETIRE_DEADLINE in deadlines:
            return result
        deadlines = {**deadlines, RETIRE_DEADLINE: now + retirement.record}
    elif RETIRE_DEADLINE in deadlines:
        deadlines = {n: w for n, w in deadlines.items() if n != RETIRE_DEADLINE}
    else:
        return result
    return replace(result, record=checked_copy(record, {"deadlines": deadlines}))


def _fire_deadlines(
    process: Process[Any],
    record: Record[Any],
    key: str,
    now: datetime,
    retirement: Retirement | None,
) -> StepResult:
    due = sorted((when, name) for name, when in record.deadlines.items() if when <= now)
    outbound: list[Outbound] = []
    for when, name in due:
        if name == RETIRE_DEADLINE:
            continue  # after the definition's own: they may still change the state

        # The id of a deadline's outputs derives from the deadline itself, so a repeated
        # tick before the new state is stored re-creates the same messages.
        ctx = Context(key=key, now=now, cause_id=derive_id(key, f"{name}@{when.isoformat()}"))
        remaining = {n: w for n, w in record.deadlines.items() if n != name}
        record = checked_copy(record, {"deadlines": remaining})
        decision = process.on_deadline(record.state, name, ctx)
        result = _apply(process, record, decision, ctx)
        record = result.record
        outbound.extend(result.outbound)
    if RETIRE_DEADLINE in record.deadlines and record.deadlines[RETIRE_DEADLINE] <= now:
        record = _retire(process, record, key, now, retirement)
    return StepResult(record, tuple(outbound))


def _retire(
    process: Process[Any],
    record: Record[Any],
    key: str,
    now: datetime,
    retirement: Retirement | None,
) -> Record[Any]:
    """The record's marker, once nothing but its retirement is left to happen: a
    definition's own deadline still pending (or a state final no more) postpones it."""
    is_final = final_of(process)
    others = [w for n, w in record.deadlines.items() if n != RETIRE_DEADLINE]
    if retirement is None or is_final is None or not is_final(record.state) or others:
        later = {n: w for n, w in record.deadlines.items() if n != RETIRE_DEADLINE}
        if others and retirement is not None:
            later[RETIRE_DEADLINE] = max(others)
        return checked_copy(record, {"deadlines": later})
    return record.marker(process.initial(key), now, now + retirement.marker)


def _apply(
    process: Process[Any],
    record: Record[Any],
    decision: Decision[Any],
    ctx: Context,
    also: dict[str, Any] | None = None,
) -> StepResult:
    """``record`` after ``decision`` (and the fields in ``also``), and what it sends."""
    deadlines = {n: w for n, w in record.deadlines.items() if n not in decision.clear_deadlines}
    deadlines.update(decision.set_deadlines)
    outbound = [_command(c, ctx, i) for i, c in enumerate(decision.send)]
    sequence = record.sequence
    for i, event in enumerate(decision.events):
        sequence += 1
        outbound.append(_event(process, event, ctx, i, sequence, record.version))
    new = checked_copy(
        record,
        {
            "state": decision.state,
            "sequence": sequence,
            "deadlines": deadlines,
            "started_at": record.started_at or ctx.now,
            "stepped_at": ctx.now,
            **(also or {}),
        },
    )
    return StepResult(new, tuple(outbound))


def _command(command: Command, ctx: Context, index: int) -> Outbound:
    envelope = Envelope.wrap(
        command.message,
        message_id=ctx.child_id(f"send/{index}"),
        key=command.key,
        occurred_at=ctx.now,
        saga_id=command.saga_id or ctx.saga_id,
        causation_id=ctx.cause_id,
        reply_to=command.reply_to,
    )
    return Outbound(command.channel, envelope)


def _event(
    process: Process[Any],
    event: Message | Fact,
    ctx: Context,
    index: int,
    sequence: int,
    version: int | None,
) -> Outbound:
    """A fact on the domain-event topic, stamped with the version of the instance that
    publishes it (its record's: None for an unversioned definition, which leaves it out)."""
    message = event.message if isinstance(event, Fact) else event
    saga_id = event.saga_id if isinstance(event, Fact) else ctx.saga_id
    envelope = Envelope.wrap(
        message,
        message_id=ctx.child_id(f"event/{index}"),
        key=entity_key(process.entity_type, ctx.key),
        occurred_at=ctx.now,
        saga_id=saga_id,
        causation_id=ctx.cause_id,
        entity_type=process.entity_type,
        sequence=sequence,
        definition_version=version,
    )
    return Outbound(EVENTS_CHANNEL, envelope)


def entity_key(entity_type: str, entity_id: str) -> str:
    """Key of an entity's stream on the domain-event topic."""
    return f"{entity_type}:{entity_id}"


def due_keys(records: Iterable[tuple[str, Record[Any]]], now: datetime) -> list[str]:
    """Keys with at least one deadline due at ``now``."""
    return [k for k, r in records if (d := r.next_deadline()) is not None and d <= now]


def reply(ctx: Context, message: Message) -> tuple[Command, ...]:
    """Answer the sender of the current command, if it asked for an answer."""
    if ctx.reply_to is None or ctx.saga_id is None:
        return ()
    return (Command(ctx.reply_to, ctx.saga_id, message, saga_id=ctx.saga_id),)
