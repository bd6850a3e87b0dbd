"""The saga kit on a small saga of its own: two stock holds in parallel, then a pivot that
confirms both. What the order and enrollment sagas show about the kit is in their tests;
these are the rules they do not reach."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import ClassVar, get_args

import pytest
from pydantic import ValidationError

from sagas.contracts import ledger as lc
from sagas.contracts import orders as oc
from sagas.machinery.kit import STEP_DEADLINE, Flow, Saga, SagaState, Step
from sagas.machinery.legs import Leg
from sagas.machinery.process import Context, Decision
from sagas.machinery.statuses import SagaStatuses
from sagas.messages import Envelope, Message

from .helpers import T0, Driver, at, commands, envelope, events, tick

pytestmark = pytest.mark.unit
B = "b-1"


class PairState(SagaState):
    a: Leg | None = None
    b: Leg | None = None


@dataclass(frozen=True)
class Pair(Saga[PairState]):
    """Hold one unit of two products, then (past the pivot) confirm both."""

    STATUSES: ClassVar[SagaStatuses] = SagaStatuses(
        event=oc.OrderStatusChanged,
        statuses=get_args(oc.OrderStatus),
        final=oc.FINAL_STATUSES,
        failed=oc.FAILED_STATUSES,
    )
    COMMANDS: ClassVar[tuple[type[Message], ...]] = (oc.CancelOrder,)
    PORTS = {"stock": lc.PORT}
    LEGS = {"a": "stock", "b": "stock"}
    FLOWS = {
        "pair": Flow(
            steps=(
                Step("PENDING", hold=("a", "b")),
                Step("CONFIRMING", confirm=("a", "b"), forward=True),
            ),
            done="CONFIRMED",
            failed="CANCELLED",
        )
    }
    KEY: ClassVar[str] = "the pair's id"
    name: str = "pair"
    entity_type: str = "pair"
    stock: str = "inventory"
    step_timeout: timedelta = timedelta(seconds=10)
    state_type: type[PairState] = PairState

    def command(self, state: PairState, message: Message, ctx: Context) -> Decision[PairState]:
        legs = PairState(a=Leg(key="p-a", rid=f"{ctx.key}:a"), b=Leg(key="p-b", rid=f"{ctx.key}:b"))
        return self.begin(legs, "pair", ctx, message)

    def hold(
        self, state: PairState, field: str, leg: Leg, ctx: Context, cause: Message | None
    ) -> Message:
        return lc.Reserve(reservation_id=leg.rid, quantity=1, ttl_seconds=60)


def answer(message: Message) -> Envelope:
    return envelope(message, key=B, saga_id=B)


def reserved(which: str) -> Envelope:
    rid = f"{B}:{which}"
    return answer(
        lc.Reserved(on_hand=1, reserved=1, reservation_id=rid, quantity=1, expires_at="x")
    )


def confirmed(which: str) -> Envelope:
    return answer(lc.Confirmed(on_hand=0, reserved=0, reservation_id=f"{B}:{which}", quantity=1))


def refused(which: str) -> Envelope:
    rid = f"{B}:{which}"
    return answer(lc.ConfirmRefused(on_hand=0, reserved=0, reservation_id=rid, reason="gone"))


def started() -> Driver:
    saga = Driver(Pair())
    saga(answer(oc.CancelOrder()))
    return saga


def first_commands() -> list[tuple[str, str, str]]:
    return commands(Driver(Pair())(answer(oc.CancelOrder())).outbound)


def test_what_travels_follows_from_the_declaration() -> None:
    assert (oc.CancelOrder, *lc.PORT.answers()) == Pair.ACCEPTS
    assert (oc.OrderStatusChanged,) == Pair.FACTS


def test_a_step_sends_to_every_leg_and_the_next_begins_when_none_awaits_an_answer() -> None:
    assert first_commands() == [
        ("inventory", "p-a", "ledger.Reserve"),
        ("inventory", "p-b", "ledger.Reserve"),
    ]
    saga = started()
    assert saga.state.status == "PENDING"
    assert saga(reserved("b")).outbound == ()
    out = saga(reserved("a")).outbound
    assert commands(out) == [
        ("inventory", "p-a", "ledger.Confirm"),
        ("inventory", "p-b", "ledger.Confirm"),
    ]
    assert [e.status for e in events(out)] == ["CONFIRMING"]
    saga(confirmed("a"))
    assert [e.status for e in events(saga(confirmed("b")).outbound)] == ["CONFIRMED"]
    assert saga.record.deadlines == {}


def test_an_answer_counts_once_and_only_while_its_leg_awaits_it() -> None:
    saga = started()
    saga(reserved("a"))
    before = saga.state
    assert saga(reserved("a")).outbound == ()  # the same answer again, under a new message id
    assert saga.state == before
    assert saga(confirmed("a")).outbound == ()  # a confirm nobody asked for yet
    assert saga.state == before


def test_before_the_pivot_a_timeout_releases_every_leg_taken() -> None:
    saga = started()
    saga(reserved("a"))
    out = saga(tick(B), now=at(10)).outbound
    assert commands(out) == [
        ("inventory", "p-a", "ledger.Cancel"),
        ("inventory", "p-b", "ledger.Cancel"),
    ]
    assert [(e.status, e.reason) for e in events(out)] == [("CANCELLED", "timeout")]


def test_past_the_pivot_a_timeout_asks_again_only_what_is_unanswered_and_releases_nothing() -> None:
    saga = started()
    saga(reserved("a"))
    saga(reserved("b"))
    saga(confirmed("a"))
    out = saga(refused("b")).outbound  # past the pivot a refusal compensates nothing
    assert commands(out) == []
    assert saga.state.a is not None and saga.state.a.status == "confirmed"
    assert saga.state.b is not None and saga.state.b.status == "released"  # and says so
    saga = started()
    saga(reserved("a"))
    saga(reserved("b"), now=at(5))
    saga(confirmed("b"))
    out = saga(tick(B), now=at(15)).outbound
    assert commands(out) == [("inventory", "p-a", "ledger.Confirm")]
    assert events(out) == []
    assert saga.record.deadlines == {STEP_DEADLINE: at(25)}
    assert saga.state.status == "CONFIRMING"


def test_a_state_update_is_checked_by_name_and_type() -> None:
    state = PairState()
    with pytest.raises(TypeError, match="PairState has no field satus"):
        state.but(satus="PENDING")
    with pytest.raises(ValidationError):
        state.but(a="not a leg")
    with pytest.raises(ValidationError):
        Leg().but(status="lost")
    assert state.but(status="PENDING").status == "PENDING"


def test_a_status_that_is_not_declared_is_refused() -> None:
    saga = Pair()
    ctx = Context(key=B, now=T0, cause_id="c")
    with pytest.raises(ValueError, match="'LOST' is not one of its STATUSES"):
        saga.settle(PairState(), "LOST", ctx)


def test_a_flow_is_checked_when_it_is_declared() -> None:
    with pytest.raises(ValueError, match="past the pivot cannot hold"):
        Flow(
            steps=(Step("PENDING", hold=("a",), forward=True),),
            done="CONFIRMED",
            failed="CANCELLED",
        )
    with pytest.raises(ValueError, match="acts on 'c', which LEGS does not declare"):

        class Broken(Pair):
            FLOWS = {
                "pair": Flow(
                    steps=(Step("PENDING", hold=("c",)),), done="CONFIRMED", failed="CANCELLED"
                )
            }
