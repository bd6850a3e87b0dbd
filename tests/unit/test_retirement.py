"""Retirement in the machinery: a final record retires after a retention, a marker drops
every message for its key for a second one, then the key is deleted (and is new again)."""

from dataclasses import dataclass
from datetime import timedelta
from decimal import Decimal
from typing import Any, ClassVar

import pytest
from pydantic import BaseModel, ConfigDict

from sagas.contracts import ledger as lc
from sagas.contracts import orders as oc
from sagas.contracts import payment as pc
from sagas.contracts.legacy import TransactionEnded
from sagas.definitions.legacy_correlator import LegacyCorrelator
from sagas.definitions.legacy_domain import LegacyDomain, LegacyDomainState, Waiting
from sagas.definitions.order_saga import OrderSaga
from sagas.machinery.history import CHUNK, chunk_key
from sagas.machinery.process import Context, Decision
from sagas.machinery.record import FORGET_DEADLINE, Record
from sagas.machinery.retirement import RETIRE_DEADLINE, Retirement
from sagas.machinery.step import StepResult, step
from sagas.messages import Envelope, Message
from sagas.participants.ledger import CapacityLedger
from sagas.participants.payment import PaymentGateway

from .helpers import T0, at, envelope, kept, tick

pytestmark = pytest.mark.unit

RETIRE = Retirement(record=timedelta(minutes=60), marker=timedelta(hours=24))
SAGA = OrderSaga()
ORDER = "o-1"


def place(message_id: str | None = None) -> Envelope:
    line = oc.OrderLine(product_id="p1", quantity=1, unit_price=Decimal("10"))
    cmd = oc.PlaceOrder(customer_id="c1", lines=(line,), payment=oc.PaymentDetails(method="card"))
    return envelope(cmd, key=ORDER, saga_id=ORDER, message_id=message_id)


def cancel() -> Envelope:
    return envelope(oc.CancelOrder(reason="changed my mind"), key=ORDER, saga_id=ORDER)


@dataclass
class Key:
    """One key's record as the worker's table holds it, stepped with a retirement."""

    process: Any
    record: Record[Any] | None = None

    def __call__(self, env: Envelope, now: Any = T0) -> StepResult:
        result = step(self.process, self.record, env, now, retirement=RETIRE)
        self.record = kept(self.record, result)
        return result


def cancelled_order() -> Key:
    key = Key(SAGA)
    key(place(message_id="place-1"))
    key(cancel())
    assert key.record is not None and key.record.state.status == "CANCELLED"
    return key


# --- a final record gets its retirement ---------------------------------------------------


def test_a_final_order_gets_its_retirement_deadline_once_and_a_live_one_none():
    key = Key(SAGA)
    key(place())
    assert key.record is not None and RETIRE_DEADLINE not in key.record.deadlines
    key(cancel(), now=at(5))
    assert key.record.deadlines == {RETIRE_DEADLINE: at(5) + RETIRE.record}
    # a later message that leaves it final does not push its retirement back
    key(cancel(), now=at(50))
    assert key.record.deadlines == {RETIRE_DEADLINE: at(5) + RETIRE.record}


def test_without_a_retirement_nothing_retires():
    record = step(SAGA, None, cancel(), T0).record
    assert record.state.final and record.deadlines == {}


def test_entity_participants_never_retire():
    ledger = CapacityLedger(name="inventory", entity_type="product")
    key = Key(ledger)
    key(envelope(lc.SetCapacity(on_hand=0), key="p1"))
    assert key.record is not None and key.record.deadlines == {}
    assert not hasattr(ledger, "is_final")


def test_a_payment_retires_once_captured():
    key = Key(PaymentGateway())
    key(envelope(pc.Authorize(amount=Decimal(5), method="card"), key=ORDER, saga_id=ORDER))
    assert key.record is not None and RETIRE_DEADLINE not in key.record.deadlines
    key(envelope(pc.Capture(), key=ORDER, saga_id=ORDER))
    assert key.record.state.status == "CAPTURED"
    assert RETIRE_DEADLINE in key.record.deadlines


# --- the marker ----------------------------------------------------------------------------


def test_on_its_deadline_a_final_record_becomes_a_small_marker():
    key = cancelled_order()
    before = key.record
    assert before is not None
    retire_at = before.deadlines[RETIRE_DEADLINE]
    result = key(tick(ORDER), now=retire_at)
    marker = result.record
    assert result.changed and result.outbound == ()
    assert marker.retired_at == retire_at
    assert marker.state == SAGA.initial(ORDER)
    assert marker.deadlines == {FORGET_DEADLINE: retire_at + RETIRE.marker}
    assert len(marker.seen) == 0
    assert len(marker.encode()) < 400 < len(before.encode())
    # it decodes without any chunk
    assert Record.codec(SAGA.state_type).decode(ORDER, marker.encode(), lambda _: None) == marker


def test_a_tick_before_the_retirement_is_due_keeps_the_record():
    key = cancelled_order()
    assert key.record is not None
    result = key(tick(ORDER), now=key.record.deadlines[RETIRE_DEADLINE] - timedelta(seconds=1))
    assert key.record.retired_at is None and key.record.state.status == "CANCELLED"
    assert result.outbound == ()


def retired_order() -> Key:
    key = cancelled_order()
    assert key.record is not None
    key(tick(ORDER), now=key.record.deadlines[RETIRE_DEADLINE])
    assert key.record.retired_at is not None
    return key


def test_a_placeorder_redelivered_after_retirement_starts_nothing():
    key = retired_order()
    marker = key.record
    for again in (place(message_id="place-1"), place(message_id="another-id")):
        result = key(again, now=at(7200))
        assert result.unchanged and result.retired and result.outbound == ()
        assert key.record is marker  # nothing stored


def test_late_replies_to_a_retired_saga_are_dropped_and_store_nothing():
    key = retired_order()
    fact = pc.Voided(amount=Decimal(10), refunded=False)
    result = key(envelope(fact, key=ORDER, saga_id=ORDER), now=at(7200))
    assert result.unchanged and result.outbound == ()


def test_after_the_markers_retention_the_key_is_deleted_and_an_order_id_is_new_again():
    key = retired_order()
    assert key.record is not None
    forget_at = key.record.deadlines[FORGET_DEADLINE]
    # a tick before the forget deadline changes nothing
    assert key(tick(ORDER), now=forget_at - timedelta(seconds=1)).unchanged
    result = key(tick(ORDER), now=forget_at)
    assert result.deleted and result.outbound == ()
    assert key.record is None
    # the documented limit: the same PlaceOrder now starts a new saga
    again = key(place(message_id="place-1"), now=forget_at + timedelta(seconds=1))
    assert again.changed and key.record is not None
    assert key.record.state.status == "PENDING"


# --- what a key that changes nothing stores ------------------------------------------------


def test_a_stray_reply_or_tick_for_an_unknown_key_stores_nothing():
    key = Key(SAGA)
    for stray in (
        envelope(pc.Captured(amount=Decimal(1)), key="o-unknown", saga_id="o-unknown"),
        tick("o-unknown"),
    ):
        result = key(stray)
        assert result.unchanged and not result.retired and result.outbound == ()
        assert key.record is None


# --- the chunks of a retired record ---------------------------------------------------------


def test_a_marker_is_deleted_with_every_chunk_its_record_sealed_chunks_first():
    key = cancelled_order()
    for _ in range(2 * CHUNK):  # each refused: the record's seen ids fill two chunks
        key(cancel())
    record = key.record
    assert record is not None and record.seen.reads_chunks()
    with pytest.raises(ValueError):
        record.deletes(ORDER)  # a record that reads chunks is never deleted directly
    key(tick(ORDER), now=record.deadlines[RETIRE_DEADLINE])
    marker = key.record
    assert marker is not None and not marker.seen.reads_chunks()
    writes = marker.deletes(ORDER)
    assert writes == [
        (chunk_key(ORDER, "seen/0"), None),
        (chunk_key(ORDER, "seen/1"), None),
        (ORDER, None),
    ]


def test_an_idle_cdc_transaction_retires():
    correlator = LegacyCorrelator(retention=timedelta(minutes=1))
    key = Key(correlator)
    key(envelope(TransactionEnded(tx_id="7", event_count=3), key="tx:7"))
    assert key.record is not None and RETIRE_DEADLINE not in key.record.deadlines
    key(tick("tx:7"), now=at(61))  # its expire deadline resets it: idle
    assert key.record is not None and key.record.deadlines == {
        RETIRE_DEADLINE: at(61) + RETIRE.record
    }


# --- the machinery's rules, on a definition of its own --------------------------------------


class Door(BaseModel):
    model_config = ConfigDict(frozen=True)
    shut: bool = False


def shut() -> Envelope:
    return envelope(oc.CancelOrder(reason="shut"), key="d")


def open_() -> Envelope:
    return envelope(lc.SetCapacity(on_hand=1), key="d")


@dataclass(frozen=True)
class Doors:
    ACCEPTS: ClassVar[tuple[type[Message], ...]] = (oc.CancelOrder, lc.SetCapacity)
    FACTS: ClassVar[tuple[type[Message], ...]] = ()
    KEY: ClassVar[str] = "a door"
    name: str = "doors"
    entity_type: str = "door"
    state_type: type[Door] = Door

    def initial(self, key: str) -> Door:
        return Door()

    def is_final(self, state: Door) -> bool:
        return state.shut

    def decide(self, state: Door, message: Message, ctx: Context) -> Decision[Door]:
        shut = isinstance(message, oc.CancelOrder)
        later = {"bell": ctx.now + timedelta(hours=3)} if shut else {}
        return Decision(Door(shut=shut), set_deadlines=later)

    def on_deadline(self, state: Door, name: str, ctx: Context) -> Decision[Door]:
        return Decision(state)


def test_a_state_final_no_more_loses_its_retirement():
    key = Key(Doors())
    key(shut())
    assert key.record is not None and RETIRE_DEADLINE in key.record.deadlines
    key(open_())
    assert RETIRE_DEADLINE not in key.record.deadlines


def test_a_definitions_own_deadline_still_pending_postpones_the_retirement():
    key = Key(Doors())
    key(shut())
    assert key.record is not None
    # retirement is due at 1 h, the door's bell at 3 h: it retires after the bell
    key(tick("d"), now=at(3600))
    assert key.record.retired_at is None
    assert key.record.deadlines[RETIRE_DEADLINE] == at(3 * 3600)
    key(tick("d"), now=at(3 * 3600))
    assert key.record.retired_at == at(3 * 3600)


def test_a_command_refused_for_an_unknown_key_is_answered_and_stores_nothing():
    """A Capture for a payment the table does not hold: refused, and no NEW payment is
    kept (it would never become final, never retire)."""
    key = Key(PaymentGateway())
    result = key(envelope(pc.Capture(), key=ORDER, saga_id=ORDER, reply_to="order-saga"))
    assert result.unchanged and key.record is None
    [refusal] = result.outbound
    assert refusal.envelope.type == pc.CaptureRefused.TYPE


def test_a_legacy_enrollment_instance_retires_once_its_enroll_is_sent_a_student_never():
    domain = LegacyDomain()
    waiting = Waiting(student_id="s1", course_id="c1", awaiting=frozenset({"course"}))
    assert not domain.is_final(LegacyDomainState(pending=waiting))
    sent = waiting.model_copy(update={"awaiting": frozenset(), "enroll_sent": True})
    assert domain.is_final(LegacyDomainState(pending=sent))
    assert not domain.is_final(LegacyDomainState(enrollments={"c1": "e1"}))
    assert not domain.is_final(LegacyDomainState())
