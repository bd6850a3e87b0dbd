"""Replay one key's recorded inputs through a candidate definition, decision by decision.

The recorded history of a key is its inputs in the order its partition holds them, and
what every decision sent (commands and replies on the process channels, facts on the event
topic), each message naming its cause. The replay runs the candidate from the key's
initial state through :func:`~sagas.machinery.step.step`, as the worker does (dedupe,
deadlines, retirement), and compares what each decision sends with what the recorded one
sent under the same cause (:mod:`sagas.machinery.replay_compare`).

When was each input decided? A decision's messages carry the worker's clock
(``occurred_at``), so an input that caused messages is stepped at that time (the latest, if
a crash made the worker decide it again); one that caused none at its own send time (or the
previous decision's, if later). A tick fires deadlines whose outputs name the deadline as
their cause, not the tick: it is stepped at the time of the recorded outputs of the
deadlines the replay holds, which is when the worker fired them.

Deadlines live in the worker's table, not on a topic, so the recorded run's deadlines are
known only by replaying it: given a ``baseline`` (the definition that ran, with the settings
it ran with), the replay steps it beside the candidate and fires a candidate's deadline that
the baseline does not hold at its own time, as the worker's timer would have (a recorded
tick fires only the deadlines the recorded run had). Without a baseline the candidate is
taken to set the recorded deadlines, and its deadlines fire on the recorded ticks only.

A deadline the candidate sets otherwise is not a divergence by itself, as no other part of
its state is: what it changes is decided when it fires (its own tick's messages, which no
recorded decision sent) or when it no longer fires (a recorded deadline decision the replay
never makes). So a shorter step timeout diverges on exactly the sagas whose step took
longer, at their timeout, not on every saga that set a step deadline; how many keys set
their deadlines otherwise is counted (``KeyReplay.deadlines_otherwise``), for the report.

A key whose history is partly past retention cannot be replayed from its initial state:
its first recorded fact is not its first (a sequence above 1), or its partition lost
records (``truncated``) and its first input starts nothing (publishes no first fact).
Such a key is reported as not replayable, with why.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from sagas.contracts.system import Tick
from sagas.ids import derive_id
from sagas.machinery.process import Process
from sagas.machinery.record import Record
from sagas.machinery.replay_compare import Sent, differences, unique
from sagas.machinery.retirement import RETIRE_DEADLINE, Retirement
from sagas.machinery.step import DEFAULT_SEEN_WINDOW, EVENTS_CHANNEL, StepResult, step
from sagas.messages import ContractError, Envelope


class Recording:
    """Every message recorded on the process channels and the event topic, by its cause."""

    def __init__(
        self, sent: Iterable[Sent], dead_lettered: Mapping[str, str] | None = None
    ) -> None:
        self.dead_lettered = dict(dead_lettered or {})
        """Inputs the worker dead-lettered (by message id), and why: nothing of their
        decision was applied (a contract broken, a message or state too large)."""
        self.by_cause: dict[str, list[Sent]] = defaultdict(list)
        self.ids: set[str] = set()
        for s in sent:
            self.ids.add(s.message_id)
            if s.envelope.causation_id is not None:
                self.by_cause[s.envelope.causation_id].append(s)

    def caused_by(self, cause: str) -> list[Sent]:
        return self.by_cause.get(cause, [])

    def decided_at(self, cause: str) -> datetime | None:
        """When the worker decided on ``cause``: its messages' time (the latest version)."""
        return max((s.at for s in self.caused_by(cause)), default=None)

    def deadline_decisions(
        self, keys: dict[str, tuple[str, str]]
    ) -> dict[tuple[str, str], list[str]]:
        """The causes that are no recorded message (a deadline's), by the (channel, key) that
        decided them: told by a fact's entity (``keys``: entity type -> channel) or a
        command's reply channel and saga. A cause told by neither is under ``("", "")``."""
        found: dict[tuple[str, str], list[str]] = defaultdict(list)
        for cause, sent in self.by_cause.items():
            if cause not in self.ids:
                found[_decider(sent, keys)].append(cause)
        return found


def _decider(sent: list[Sent], entity_channels: dict[str, tuple[str, str]]) -> tuple[str, str]:
    for s in sent:
        e = s.envelope
        if s.channel == EVENTS_CHANNEL and e.entity_type in entity_channels:
            channel, prefix = entity_channels[e.entity_type]
            return channel, e.key.removeprefix(prefix)
        if e.reply_to is not None and e.saga_id is not None:
            return e.reply_to, e.saga_id
    return "", ""


@dataclass(frozen=True)
class KeyHistory:
    channel: str
    key: str
    inputs: Sequence[Envelope]
    """In the order its partition holds them."""
    truncated: int = 0
    """The earliest offset its partition still holds (above 0: older records were deleted)."""
    deadline_causes: Sequence[str] = ()
    """The recorded deadline decisions told to be this key's (Recording.deadline_decisions)."""


@dataclass(frozen=True)
class Compared:
    """One decision, recorded and replayed."""

    at: datetime
    cause: str
    what: str
    """The input's type, ``deadline <name>``, or ``recorded decision not replayed``."""
    status: str
    """The key's status before the decision (its state's ``status``, else ``-``)."""
    recorded: tuple[Sent, ...]
    replayed: tuple[Sent, ...]
    differences: tuple[str, ...]

    @property
    def kind(self) -> str:
        return self.differences[0] if self.differences else ""


@dataclass
class KeyReplay:
    channel: str
    key: str
    decisions: int = 0
    diverging: list[Compared] = field(default_factory=list)
    not_replayable: str | None = None
    dead_lettered: int = 0
    """Inputs the worker dead-lettered: stepped by neither run, not compared."""
    deadlines_otherwise: int = 0
    """Decisions after which the candidate's deadlines newly differed from the baseline's
    (none without a baseline): a difference only where one fires, or no longer fires."""
    status_before: str = "-"
    """The final status the recorded run reached (its baseline's; the candidate's when
    there is no baseline)."""
    status_after: str = "-"
    """The final status the candidate reached."""

    @property
    def first(self) -> Compared | None:
        return min(self.diverging, key=lambda c: c.at, default=None)


@dataclass(frozen=True)
class Candidate:
    """A definition and the machinery settings it is stepped with."""

    process: Process[Any]
    retirement: Retirement | None = None
    seen_window: int = DEFAULT_SEEN_WINDOW


def replay_key(
    history: KeyHistory,
    candidate: Candidate,
    recording: Recording,
    baseline: Candidate | None = None,
    until: datetime | None = None,
) -> KeyReplay:
    """Replay ``history`` through ``candidate`` and compare it with ``recording``;
    ``until``: the end of the recording (a candidate's own deadlines fire up to it)."""
    report = KeyReplay(history.channel, history.key)
    if (why := _not_replayable(history, recording)) is not None:
        report.not_replayable = why
        return report
    run = _Run(history, candidate, recording, baseline, report)
    for envelope in history.inputs:
        run.input(envelope)
    if until is not None:
        run.fire_own_deadlines(until)
    run.unreplayed(history.deadline_causes)
    report.status_after = _status(run.mine)
    report.status_before = _status(run.theirs if baseline is not None else run.mine)
    return report


@dataclass
class Replay:
    keys: list[KeyReplay]
    unattributed: int
    """Recorded deadline decisions told to no key (their messages name neither an entity
    nor a saga that sent them): not compared."""


def replay_all(
    histories: Iterable[KeyHistory],
    candidates: Mapping[str, Candidate],
    recording: Recording,
    baselines: Mapping[str, Candidate] | None = None,
    until: datetime | None = None,
) -> Replay:
    """Replay every key of ``histories`` through the candidate of its channel (and its
    baseline, if any); a channel without a candidate is not replayable."""
    owners = entity_owners(candidates)
    deadline_causes = recording.deadline_decisions(owners)
    keys = []
    for history in histories:
        candidate = candidates.get(history.channel)
        if candidate is None:
            keys.append(
                KeyReplay(
                    history.channel, history.key, not_replayable="no definition listens there"
                )
            )
            continue
        causes = deadline_causes.pop((history.channel, history.key), [])
        baseline = None if baselines is None else baselines.get(history.channel)
        keyed = replace(history, deadline_causes=causes)
        keys.append(replay_key(keyed, candidate, recording, baseline, until))
    return Replay(keys, sum(len(c) for c in deadline_causes.values()))


def entity_owners(candidates: Mapping[str, Candidate]) -> dict[str, tuple[str, str]]:
    """Entity type -> (its channel, its entity keys' prefix), for the entity types one
    channel alone publishes: how a deadline's fact tells the key that decided it."""
    entities = Counter(c.process.entity_type for c in candidates.values())
    return {
        c.process.entity_type: (name, f"{c.process.entity_type}:")
        for name, c in candidates.items()
        if entities[c.process.entity_type] == 1
    }


def _not_replayable(history: KeyHistory, recording: Recording) -> str | None:
    facts = [
        s
        for e in history.inputs
        for s in recording.caused_by(e.message_id)
        if s.channel == EVENTS_CHANNEL and s.envelope.sequence is not None
    ]
    first = min((s.envelope.sequence for s in facts if s.envelope.sequence), default=None)
    if first is not None and first > 1:
        return f"its first recorded fact is number {first}: earlier inputs are past retention"
    if history.truncated > 0 and first != 1:
        return (
            f"its partition starts at offset {history.truncated} (older records deleted) "
            "and its first recorded input starts nothing"
        )
    return None


class _Run:
    """The candidate (``mine``) and the baseline (``theirs``) stepped through one history."""

    def __init__(
        self,
        history: KeyHistory,
        candidate: Candidate,
        recording: Recording,
        baseline: Candidate | None,
        report: KeyReplay,
    ) -> None:
        self.key = history.key
        self.candidate, self.baseline = candidate, baseline
        self.recording, self.report = recording, report
        self.mine: Record[Any] | None = None
        self.theirs: Record[Any] | None = None
        self.now: datetime | None = None
        self.consumed: set[str] = set()
        self.timeline: list[tuple[datetime, str]] = []

    def input(self, envelope: Envelope) -> None:
        if envelope.message_id in self.recording.dead_lettered:
            self.report.dead_lettered += 1  # nothing of it was applied: as the worker did
            return
        is_tick = envelope.type == Tick.TYPE
        now = self._tick_time(envelope) if is_tick else self._time(envelope)
        self.fire_own_deadlines(now)
        status, before = self._status(), self.mine
        deadlines = self._deadline_diff()
        mine, error = self._step(self.candidate, self.mine, envelope, now)
        if self.baseline is not None:
            self.theirs = _safe(self.baseline, self.theirs, envelope, now)
        self.mine = mine.after if mine is not None else self.mine
        causes = (_fired(self.key, before, now) if is_tick else [envelope.message_id]) + sorted(
            {o.causation_id for o in (mine.sent if mine else ()) if o.causation_id}
        )
        self._compare(dict.fromkeys(causes), mine, envelope, now, status, error, deadlines)
        self.now = now

    def fire_own_deadlines(self, until: datetime) -> None:
        """Fire the candidate's deadlines due before ``until`` that the recorded run did not
        hold (the baseline's): no recorded tick would fire them."""
        if self.baseline is None:
            return
        while self.mine is not None:
            held = self.theirs.deadlines.items() if self.theirs is not None else ()
            own = [
                (w, n) for n, w in self.mine.deadlines.items() if w < until and (n, w) not in held
            ]
            if not own:
                return
            when = min(own)[0]
            tick = Envelope.wrap(
                Tick(), message_id=derive_id(self.key, f"replay-tick@{when.isoformat()}"),
                key=self.key, occurred_at=when,
            )  # fmt: skip
            status, before = self._status(), self.mine
            deadlines = self._deadline_diff()
            mine, error = self._step(self.candidate, self.mine, tick, when)
            self.mine = mine.after if mine is not None else self.mine
            causes = _fired(self.key, before, when)
            self._compare(dict.fromkeys(causes), mine, tick, when, status, error, deadlines)

    def unreplayed(self, deadline_causes: Sequence[str]) -> None:
        """Recorded deadline decisions of this key that the replay never made."""
        for cause in deadline_causes:
            if cause in self.consumed:
                continue
            recorded = tuple(self.recording.caused_by(cause))
            at = min(s.at for s in recorded)
            status = next((s for t, s in reversed(self.timeline) if t <= at), "-")
            found = differences(recorded, ())
            self.report.diverging.append(
                Compared(at, cause, "recorded decision not replayed", status,
                         _commands_first(unique(recorded)), (), tuple(found))
            )  # fmt: skip

    def _compare(
        self,
        causes: dict[str, None],
        mine: _Stepped | None,
        envelope: Envelope,
        now: datetime,
        status: str,
        error: str | None,
        deadlines: list[str],
    ) -> None:
        """Compare each of the decision's ``causes``; ``deadlines``: how the candidate's
        deadlines differed from the baseline's before it (a new difference is counted)."""
        self.timeline.append((now, status))
        if any(d not in deadlines for d in self._deadline_diff()):
            self.report.deadlines_otherwise += 1
        for cause in causes:
            if cause in self.consumed:
                continue  # a redelivered input: the recorded decision is compared already
            self.consumed.add(cause)
            self.report.decisions += 1
            recorded = tuple(self.recording.caused_by(cause))
            replayed = tuple(
                s for s in (mine.sent_as() if mine else ()) if s.envelope.causation_id == cause
            )
            found = differences(recorded, replayed)
            if error is not None:
                found.insert(0, error)
                error = None
            if found:
                what = envelope.type if cause == envelope.message_id else "deadline"
                shown = _commands_first(unique(recorded))
                self.report.diverging.append(
                    Compared(now, cause, what, status, shown, replayed, tuple(found))
                )

    def _status(self) -> str:
        """The candidate's status now (its initial state's before its first decision)."""
        if self.mine is None:
            return _status(Record(state=self.candidate.process.initial(self.key)))
        return _status(self.mine)

    def _deadline_diff(self) -> list[str]:
        return [] if self.baseline is None else _deadline_changes(self.theirs, self.mine)

    def _step(
        self, candidate: Candidate, record: Record[Any] | None, envelope: Envelope, now: datetime
    ) -> tuple[_Stepped | None, str | None]:
        try:
            result = step(
                candidate.process,
                record,
                envelope,
                now,
                candidate.seen_window,
                candidate.retirement,
            )
        except ContractError:
            return None, None  # dead-lettered by the worker too: the input changes nothing
        except Exception as exc:  # the worker dead-letters it; the recorded run did not
            return None, f"raised {type(exc).__name__}"
        return _Stepped(result, _stored(record, result)), None

    def _time(self, envelope: Envelope) -> datetime:
        decided = self.recording.decided_at(envelope.message_id)
        if decided is not None:
            return decided
        return envelope.occurred_at if self.now is None else max(self.now, envelope.occurred_at)

    def _tick_time(self, tick: Envelope) -> datetime:
        held = [*_deadlines(self.mine), *_deadlines(self.theirs)]
        times = [
            self.recording.decided_at(derive_id(self.key, f"{n}@{w.isoformat()}")) for n, w in held
        ]
        floor = tick.occurred_at if self.now is None else max(self.now, tick.occurred_at)
        return max([floor, *(t for t in times if t is not None)])


@dataclass(frozen=True)
class _Stepped:
    result: StepResult
    after: Record[Any] | None

    @property
    def sent(self) -> list[Envelope]:
        return [o.envelope for o in self.result.outbound]

    def sent_as(self) -> list[Sent]:
        return [Sent(o.channel, o.envelope) for o in self.result.outbound]


def _safe(
    candidate: Candidate, record: Record[Any] | None, envelope: Envelope, now: datetime
) -> Record[Any] | None:
    try:
        result = step(
            candidate.process, record, envelope, now, candidate.seen_window, candidate.retirement
        )
    except Exception:
        return record
    return _stored(record, result)


def _stored(record: Record[Any] | None, result: StepResult) -> Record[Any] | None:
    """What the worker's table holds after ``result``."""
    if result.deleted:
        return None
    return result.record if result.changed else record


def _deadlines(record: Record[Any] | None) -> list[tuple[str, datetime]]:
    return [] if record is None else list(record.deadlines.items())


def _fired(key: str, before: Record[Any] | None, now: datetime) -> list[str]:
    """The causes of the deadlines a tick at ``now`` fires (step.py names them so)."""
    return [
        derive_id(key, f"{n}@{w.isoformat()}")
        for w, n in sorted((w, n) for n, w in _deadlines(before))
        if w <= now and n != RETIRE_DEADLINE
    ]


def _deadline_changes(theirs: Record[Any] | None, mine: Record[Any] | None) -> list[str]:
    """How the candidate's deadlines differ from the baseline's (none without one)."""
    if theirs is None and mine is None:
        return []
    a, b = dict(_deadlines(theirs)), dict(_deadlines(mine))
    found = []
    for name in sorted(a.keys() | b.keys()):
        if name == RETIRE_DEADLINE or a.get(name) == b.get(name):
            continue
        if name not in a:
            found.append(f"deadline {name} set")
        elif name not in b:
            found.append(f"deadline {name} not set")
        else:
            found.append(f"deadline {name} {'later' if b[name] > a[name] else 'earlier'}")
    return found


def _commands_first(sent: list[Sent]) -> tuple[Sent, ...]:
    """As a decision sends them: its commands and replies, then its facts."""
    return tuple(sorted(sent, key=lambda s: s.channel == EVENTS_CHANNEL))


def _status(record: Record[Any] | None) -> str:
    if record is None:
        return "-"
    status = getattr(record.state, "status", None)
    return status if isinstance(status, str) else "-"  # a participant's state has none
