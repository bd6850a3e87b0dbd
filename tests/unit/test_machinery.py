"""``step``: dedupe, sequence numbers, deterministic ids and durable deadlines.

Driven through the capacity ledger, whose Reserve sets an expiry deadline.
"""

import pytest

from sagas.contracts import ledger as lc
from sagas.machinery.record import Record
from sagas.machinery.step import due_keys, step
from sagas.messages import Envelope
from sagas.participants.ledger import CapacityLedger, LedgerState

from .helpers import T0, at, commands, envelope, event_envelopes, events, feed, tick

pytestmark = pytest.mark.unit

LEDGER = CapacityLedger(name="inventory", entity_type="product")


def stock(on_hand: int) -> Envelope:
    return envelope(lc.SetCapacity(on_hand=on_hand), key="p1")


def reserve(
    rid: str, quantity: int = 1, ttl: float = 60, message_id: str | None = None
) -> Envelope:
    return envelope(
        lc.Reserve(reservation_id=rid, quantity=quantity, ttl_seconds=ttl),
        key="p1",
        message_id=message_id,
        saga_id=rid.split(":")[0],
        reply_to="order-saga",
    )


def confirm(rid: str) -> Envelope:
    return envelope(lc.Confirm(reservation_id=rid), key="p1", saga_id="o-1", reply_to="order-saga")


# --- dedupe -------------------------------------------------------------------------------


def test_a_redelivered_message_is_a_duplicate_and_changes_nothing():
    # given a ledger that processed a reserve
    first = reserve("o-1:p1")
    before = feed(LEDGER, [stock(5), first]).record
    # when the same message id arrives again
    result = step(LEDGER, before, first, at(1))
    # then it is a duplicate: nothing sent, the record untouched
    assert result.duplicate and not result.changed
    assert result.outbound == ()
    assert result.record == before
    assert result.record.state.reserved == 1


def test_a_new_message_id_is_not_a_duplicate():
    record = feed(LEDGER, [stock(5), reserve("o-1:p1")]).record
    result = step(LEDGER, record, stock(7), T0)
    assert result.changed
    assert result.record.state.on_hand == 7


def test_the_seen_window_is_bounded_to_the_latest_ids():
    # given five messages processed with a window of three
    envs = [stock(n) for n in range(1, 6)]
    record = None
    for env in envs:
        record = step(LEDGER, record, env, T0, seen_window=3).record
    # then only the last three ids are remembered
    assert list(record.seen) == [e.message_id for e in envs[-3:]]
    # and an id that fell out of the window is processed again, one inside it is not
    assert step(LEDGER, record, envs[0], T0, seen_window=3).changed
    assert step(LEDGER, record, envs[-1], T0, seen_window=3).duplicate


# --- sequence numbers ---------------------------------------------------------------------


def test_event_sequence_numbers_count_up_per_entity_without_gaps():
    # given several messages, one of which (a repeated reserve) records no new event
    run = feed(
        LEDGER,
        [stock(5), reserve("o-1:p1"), reserve("o-1:p1"), confirm("o-1:p1"), stock(9)],
    )
    envs = event_envelopes(run.outbound)
    # then events are numbered 1, 2, 3... under the entity's own key
    assert [e.sequence for e in envs] == [1, 2, 3, 4]
    assert [e.type for e in envs] == [
        "ledger.CapacitySet",
        "ledger.Reserved",
        "ledger.Confirmed",
        "ledger.CapacitySet",
    ]
    assert {(e.key, e.entity_type) for e in envs} == {("product:p1", "product")}
    assert run.record.sequence == 4


def test_commands_carry_no_sequence_and_point_back_at_their_cause():
    cause = reserve("o-1:p1", message_id="cause-1")
    result = step(LEDGER, feed(LEDGER, [stock(5)]).record, cause, T0)
    reply = next(o.envelope for o in result.outbound if o.channel == "order-saga")
    assert reply.sequence is None and reply.entity_type is None
    assert reply.causation_id == "cause-1"
    assert reply.saga_id == "o-1"


# --- deterministic ids --------------------------------------------------------------------


def test_replaying_a_message_on_the_same_old_record_recreates_the_same_messages():
    # given the record as stored before a crash
    old = feed(LEDGER, [stock(5), reserve("o-1:p1")]).record
    env = reserve("o-2:p1", quantity=2)
    # when the same envelope is processed twice on that record (the crash replay)
    first = step(LEDGER, old, env, at(1))
    second = step(LEDGER, old, env, at(1))
    # then ids and sequence numbers are identical, so consumers can drop the copies
    assert first.outbound == second.outbound
    assert [o.envelope.sequence for o in first.outbound] == [None, 3]
    assert first.record == second.record


def test_outbound_ids_are_distinct_and_differ_between_causes():
    old = feed(LEDGER, [stock(5)]).record
    a = step(LEDGER, old, reserve("o-1:p1", message_id="a"), T0)
    b = step(LEDGER, old, reserve("o-1:p1", message_id="b"), T0)
    ids_a = [o.envelope.message_id for o in a.outbound]
    ids_b = [o.envelope.message_id for o in b.outbound]
    assert len(set(ids_a)) == len(ids_a) == 2
    assert not set(ids_a) & set(ids_b)


def test_a_deadline_fired_by_two_different_ticks_yields_the_same_ids():
    old = feed(LEDGER, [stock(5), reserve("o-1:p1", ttl=60)]).record
    first = step(LEDGER, old, tick("p1"), at(61))
    second = step(LEDGER, old, tick("p1"), at(90))
    assert [o.envelope.message_id for o in first.outbound] == [
        o.envelope.message_id for o in second.outbound
    ]
    assert len(first.outbound) == 2


# --- deadlines ----------------------------------------------------------------------------


def test_a_deadline_fires_once_when_due_and_is_then_gone():
    # given a hold that expires 60 s after T0
    record = feed(LEDGER, [stock(5), reserve("o-1:p1", ttl=60)]).record
    assert record.deadlines == {"expire:o-1:p1": at(60)}
    # when a tick arrives before the deadline, then nothing happens
    early = step(LEDGER, record, tick("p1"), at(59))
    assert early.outbound == ()
    assert early.record.deadlines == record.deadlines
    assert early.record.state.reserved == 1
    # when a tick arrives at the deadline, then it fires exactly once and is removed
    due = step(LEDGER, early.record, tick("p1"), at(60))
    assert [type(m).__name__ for m in events(due.outbound)] == ["Released"]
    assert commands(due.outbound) == [("order-saga", "o-1", "ledger.Released")]
    assert due.record.deadlines == {}
    assert due.record.state.reserved == 0
    # when another tick arrives, then nothing happens
    again = step(LEDGER, due.record, tick("p1"), at(120))
    assert again.outbound == ()
    assert again.record == due.record


def test_one_tick_fires_every_due_deadline_in_time_order():
    record = feed(
        LEDGER,
        [stock(5), reserve("o-1:p1", ttl=30), reserve("o-2:p1", ttl=10), reserve("o-3:p1", ttl=99)],
    ).record
    result = step(LEDGER, record, tick("p1"), at(50))
    released = [(e.reservation_id, e.reason) for e in events(result.outbound)]
    assert released == [("o-2:p1", "expired"), ("o-1:p1", "expired")]
    assert [e.sequence for e in event_envelopes(result.outbound)] == [5, 6]
    assert set(result.record.deadlines) == {"expire:o-3:p1"}


def test_a_tick_for_an_unknown_key_does_nothing():
    result = step(LEDGER, None, tick("p9"), T0)
    assert result.outbound == ()
    assert result.record.state == LedgerState()


def test_ticks_are_not_remembered_as_seen():
    record = feed(LEDGER, [stock(5)]).record
    assert step(LEDGER, record, tick("p1"), T0).record.seen == record.seen


def test_due_keys_lists_keys_with_a_deadline_at_or_before_now():
    held = feed(LEDGER, [stock(5), reserve("o-1:p1", ttl=60)]).record
    idle = feed(LEDGER, [stock(5)]).record
    records = [("p1", held), ("p2", idle)]
    assert due_keys(records, at(59)) == []
    assert due_keys(records, at(60)) == ["p1"]


def test_a_record_survives_its_storage_format_with_deadlines():
    record = feed(LEDGER, [stock(5), reserve("o-1:p1"), reserve("o-2:p1")]).record
    codec = Record.codec(LedgerState)
    back = codec.model_validate_json(record.encode())
    assert back == record
    assert back.next_deadline() == at(60)
