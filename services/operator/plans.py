"""A cancel's dry run: what each saga's own definition would send if it got its cancel
command now, computed by running the pure definition (``decide``), not guessed.

**Design note: where the saga's state comes from.** A saga's state lives in the worker's
table, not in SQL, and the worker serves no state on purpose (its web tables are off). Two
sources were weighed: asking the worker (a new endpoint on every worker, a scatter over
partitions, a worker down means no dry run) and rebuilding the state from what the read
side records. The read side holds the saga's row: the data it started with (an order's
lines, an enrollment's student and course) and its status. That is enough, because a kit
saga's legs at a status follow from its declaration: every step before the status's step
got its answer (a hold is held, a confirm confirmed, a release released) and the step
itself waits (its holds pending, its confirms confirming). So the dry run

1. rebuilds the start command from the row (:mod:`services.operator.cancels`) and runs the
   definition's ``decide`` on it: the legs, with their real keys and reservation ids;
2. moves the legs to the recorded status's step as the declaration says;
3. runs ``decide`` with the cancel command: the commands it sends are the dry run's.

Where a status is shared by several steps (an enrollment ``PENDING`` for its seat, its
credits and their confirmation), the row cannot tell which step an instance is at: the dry
run computes the first and the last, lists what both send as certain and what only the
last sends as "if asked yet" (a release of a hold never asked is not sent: the definition
releases only legs that may be held). A status no flow of the start command reaches (an
enrollment ``TRANSFERRING``, whose new course the row does not hold) is planned as
"decided by the saga": its cancel is still sent and its definition decides on its real
state. The execution sends only the cancel command; the saga's compensations are the
saga's own decision on the worker, so the dry run can be wrong only where it says so, and
in one place it cannot see: the reservation ids of a leg a later flow replaced (an
enrollment ``ENROLLED`` after a transfer holds its seat under the transfer's reservation id,
which the row does not record; the plan names the first one). Declaring the attempt in the
row, or a worker endpoint serving a saga's legs, would close that gap.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sagas.machinery.kit import _ASKED, Flow, Saga, SagaState
from sagas.machinery.legs import Leg, Outcome
from sagas.machinery.process import Command, Context
from services.operator.cancels import Cancellation

_ANSWERED: dict[str, Outcome] = {"hold": "held", "confirm": "confirmed", "release": "released"}
"""The answer that completes each action (the kit's ``_ASKED`` says what it asks)."""


@dataclass(frozen=True)
class PlannedCommand:
    channel: str
    key: str
    type: str
    payload: dict[str, Any]
    certain: bool = True
    """False: sent only if the saga's step got that far (a status several steps share)."""

    def line(self) -> str:
        maybe = "" if self.certain else " (if asked yet)"
        rid = self.payload.get("reservation_id")
        about = f" {rid}" if rid else ""
        return f"{self.type} to {self.channel} [{self.key}]{about}{maybe}"


@dataclass(frozen=True)
class Plan:
    """What cancelling one saga does, by its definition."""

    saga_type: str
    saga_id: str
    status: str
    touched: bool
    """The cancel changes the saga (it compensates or settles); False: refused."""
    commands: tuple[PlannedCommand, ...]
    settles_in: str | None
    """The status the saga settles in (None: decided by the saga, see ``note``)."""
    note: str = ""


def _planned(command: Command, certain: bool) -> PlannedCommand:
    payload = command.message.model_dump(mode="json")
    return PlannedCommand(command.channel, command.key, command.message.TYPE, payload, certain)


def plan_cancel(
    saga: Saga[Any],
    cancellation: Cancellation,
    saga_id: str,
    row: Any,
    status: str,
    reason: str,
    now: datetime,
) -> Plan:
    """The dry run of cancelling saga ``saga_id``, whose read-model row is ``row`` and
    status ``status``."""
    ctx = Context(key=saga_id, now=now, cause_id=f"dry-run/{saga_id}", saga_id=saga_id)
    begun = saga.decide(saga.initial(saga_id), cancellation.started_by(row), ctx).state
    states = states_at(saga, begun, status)
    kind = saga.entity_type
    if not states:
        note = f"{status} is not reached by the saga's first flow: its definition decides"
        return Plan(kind, saga_id, status, True, (), None, note)
    cancel = cancellation.command(reason)
    first = saga.decide(states[0], cancel, ctx)
    last = saga.decide(states[-1], cancel, ctx)
    sure = [_planned(c, True) for c in first.send]
    keys = {(p.channel, p.key, p.type, str(p.payload)) for p in sure}
    maybe = [
        _planned(c, False)
        for c in last.send
        if (c.channel, c.key, c.message.TYPE, str(c.message.model_dump(mode="json"))) not in keys
    ]
    settles = last.state.status
    touched = bool(last.send) or settles != status
    note = "" if touched else f"refused: the saga is {status}"
    if len(states) > 1:
        note = f"{status} is shared by {len(states)} steps: the step is not recorded"
    return Plan(kind, saga_id, status, touched, (*sure, *maybe), settles, note)


def states_at(saga: Saga[Any], begun: SagaState, status: str) -> list[Any]:
    """The saga's states at ``status`` in the flow ``begun`` is in, one per step with that
    status (none if the flow never rests in it); a final or unknown status keeps the legs
    of the flow's end."""
    flow = saga.flow_of(begun)
    if flow is None:
        return []
    steps = [i for i, step in enumerate(flow.steps) if step.status == status]
    if steps:
        return [_at_step(saga, begun, flow, i).but(status=status, step=i) for i in steps]
    if status in flow.waits:
        return [begun.but(status=status)]
    if status == flow.done or status in saga.STATUSES.final:
        return [_at_step(saga, begun, flow, len(flow.steps)).but(status=status)]
    return []


def _at_step(saga: Saga[Any], state: Any, flow: Flow, index: int) -> Any:
    """``state`` (just begun: its first step asked) with every step before ``index``
    answered and step ``index`` asked, as the declaration says."""
    for i, step in enumerate(flow.steps[: index + 1]):
        for action, field in step.acts:
            asked = _ASKED[action]
            state = _each_leg(state, field, lambda leg, a=asked: leg.but(status=a))
            if i < index:
                done = _ANSWERED[action]
                state = _each_leg(state, field, lambda leg, d=done: leg.after(d))
    return state


def _each_leg(state: Any, field: str, change: Any) -> Any:
    value = getattr(state, field)
    if value is None:
        return state
    if isinstance(value, tuple):
        return state.but(**{field: tuple(change(leg) for leg in value)})
    assert isinstance(value, Leg)
    return state.but(**{field: change(value)})
