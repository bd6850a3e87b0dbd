"""What a recorded history says of its sagas' waits and its holds, read off the messages
alone (not by replaying anything): the oracle the what-if tests of ``--set step_timeout_s``
and ``--set reservation_ttl_s`` compare the replay with.

A saga's decisions are told by what they sent: commands to a participant that name the saga
as their reply channel, and facts about the saga's entity. A decision that sends a hold or
a confirm begins a step, whose deadline runs until the saga's next decision that sends a
command or announces a status (the next step, a failure, a settled or waiting status); a
decision that sends only a release or a status ends the wait. One that sends nothing (an
answer while others are awaited) or only another fact (a refused cancel) changes neither.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sagas.contracts import ledger as lc
from sagas.definitions.enrollment_saga import EnrollmentSaga
from sagas.definitions.order_saga import OrderSaga
from sagas.machinery.kit import Saga
from sagas.machinery.replay import Candidate, entity_owners
from sagas.machinery.replay_compare import Sent
from sagas.machinery.step import EVENTS_CHANNEL
from services.replay.history import RecordedHistory

SAGAS: dict[str, type[OrderSaga] | type[EnrollmentSaga]] = {
    "order-saga": OrderSaga,
    "enrollment-saga": EnrollmentSaga,
}


@dataclass(frozen=True)
class Wait:
    """One step's wait: from the decision that began it to the saga's next one."""

    began: datetime
    took: timedelta
    status: str
    forward: bool
    """The step is past the pivot (it releases and confirms at once): a timeout asks again."""


@dataclass(frozen=True)
class SagaWaits:
    channel: str
    key: str
    waits: tuple[Wait, ...]
    final: str
    """The status its last status fact announced."""

    def first_longer_than(self, timeout: timedelta) -> Wait | None:
        return next((w for w in self.waits if w.took > timeout), None)

    def after_timeout(self, timeout: timedelta) -> str:
        """The status the saga would have settled in had ``timeout`` been its step timeout:
        its flow's failed status at its first longer wait (past the pivot, unchanged)."""
        wait = self.first_longer_than(timeout)
        if wait is None or wait.forward:
            return self.final
        flows = SAGAS[self.channel].FLOWS.values()
        return next(f.failed for f in flows if wait.status in f.statuses)


def saga_waits(history: RecordedHistory) -> list[SagaWaits]:
    owners = entity_owners({name: Candidate(saga()) for name, saga in SAGAS.items()})
    by_saga: dict[tuple[str, str], dict[str, list[Sent]]] = defaultdict(lambda: defaultdict(list))
    for cause, sent in history.recording.by_cause.items():
        for s in sent:
            e = s.envelope
            owner = owners.get(e.entity_type or "") if s.channel == EVENTS_CHANNEL else None
            if s.channel != EVENTS_CHANNEL and e.reply_to in SAGAS and e.saga_id:
                by_saga[(e.reply_to, e.saga_id)][cause].append(s)
            elif owner is not None:
                by_saga[(owner[0], e.key.removeprefix(owner[1]))][cause].append(s)
    assert history.until is not None
    # a batch decides its inputs at one time: those of one key in their partition's order
    place = {e.message_id: i for h in history.histories for i, e in enumerate(h.inputs)}
    found = []
    for (channel, key), decided in by_saga.items():
        order = sorted(decided, key=lambda c: (_at(decided[c]), place.get(c, len(place))))
        found.append(_waits(channel, key, [decided[c] for c in order], history.until))
    return found


def _at(sent: list[Sent]) -> datetime:
    return max(s.at for s in sent)


def _waits(channel: str, key: str, decisions: list[list[Sent]], until: datetime) -> SagaWaits:
    saga = SAGAS[channel]
    releases = {type(p.release("r")).TYPE for p in saga.PORTS.values()}
    first = next(iter(saga.FLOWS.values())).steps[0].status
    status, final, armed = "-", "-", None
    waits: list[Wait] = []
    for sent in decisions:
        at = _at(sent)
        commands = {s.type for s in sent if s.channel != EVENTS_CHANNEL}
        said = [x for s in sent if s.channel == EVENTS_CHANNEL if (x := _status(s, saga, first))]
        if not commands and not said:
            continue
        if armed is not None:
            waits.append(Wait(armed[0], at - armed[0], armed[1], armed[2]))
        status = said[-1] if said else status
        final = status
        asks = commands - releases
        armed = (at, status, bool(asks and commands & releases)) if asks else None
    if armed is not None:
        waits.append(Wait(armed[0], until - armed[0], armed[1], armed[2]))
    return SagaWaits(channel, key, tuple(waits), final)


def _status(sent: Sent, saga: type[Saga[Any]], first: str) -> str | None:
    if sent.type == saga.STATUSES.event.TYPE:
        return str(sent.envelope.payload["status"])
    start = saga.STATUSES.start
    return first if start is not None and sent.type == start.TYPE else None


def holds(history: RecordedHistory, entity_type: str) -> dict[str, tuple[str, timedelta]]:
    """Each reservation of the ledger of ``entity_type`` (a capacity ledger's): its key
    and how long it was held (from its ``Reserved`` fact to the fact that closed it)."""
    opened: dict[str, tuple[str, datetime]] = {}
    held: dict[str, tuple[str, timedelta]] = {}
    facts = [s for sent in history.recording.by_cause.values() for s in sent]
    for s in sorted(facts, key=lambda s: s.at):
        e = s.envelope
        if s.channel != EVENTS_CHANNEL or e.entity_type != entity_type:
            continue
        rid = e.payload.get("reservation_id")
        if not isinstance(rid, str):
            continue
        if e.type == lc.Reserved.TYPE:
            opened.setdefault(rid, (e.key.split(":", 1)[1], s.at))
        elif rid in opened and rid not in held:
            key, since = opened[rid]
            held[rid] = (key, s.at - since)
    return held
