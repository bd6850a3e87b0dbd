"""The capacity ledger: reserve / confirm / cancel with a TTL on every hold."""

import random
from datetime import timedelta

import pytest

from sagas.contracts import ledger as lc
from sagas.machinery.record import Record
from sagas.machinery.step import step
from sagas.messages import Envelope
from sagas.participants.ledger import CapacityLedger, Closed, LedgerState

from .helpers import T0, Driver, at, commands, envelope, event_envelopes, events, sent, tick

pytestmark = pytest.mark.unit

LEDGER = CapacityLedger(name="inventory", entity_type="product")
P = "p1"


def set_capacity(on_hand: int) -> Envelope:
    return envelope(lc.SetCapacity(on_hand=on_hand), key=P)


def command(message: lc.Reserve | lc.Confirm | lc.Cancel, saga: str = "o-1") -> Envelope:
    """A command from ``saga``'s order saga, which wants its answer on ``order-saga``."""
    return envelope(message, key=P, saga_id=saga, reply_to="order-saga")


def reserve(saga: str = "o-1", quantity: int = 2, ttl: float = 60) -> Envelope:
    rid = f"{saga}:{P}"
    return command(lc.Reserve(reservation_id=rid, quantity=quantity, ttl_seconds=ttl), saga)


def confirm(saga: str = "o-1") -> Envelope:
    return command(lc.Confirm(reservation_id=f"{saga}:{P}"), saga)


def cancel(saga: str = "o-1") -> Envelope:
    return command(lc.Cancel(reservation_id=f"{saga}:{P}"), saga)


def stocked(on_hand: int) -> Driver:
    ledger = Driver(LEDGER)
    ledger(set_capacity(on_hand))
    return ledger


def totals(ledger: Driver) -> tuple[int, int]:
    return ledger.state.on_hand, ledger.state.reserved


# --- SetCapacity --------------------------------------------------------------------------


def test_set_capacity_sets_on_hand_and_records_the_fact():
    ledger = Driver(LEDGER)
    result = ledger(set_capacity(5))
    assert totals(ledger) == (5, 0)
    assert events(result.outbound) == [lc.CapacitySet(on_hand=5, reserved=0)]
    assert commands(result.outbound) == []  # nobody asked for an answer


def test_set_capacity_below_what_is_reserved_is_refused_and_changes_nothing():
    # given 3 of 5 units reserved
    ledger = stocked(5)
    ledger(reserve(quantity=3))
    before = ledger.state
    # when the capacity is set to 2
    result = ledger(set_capacity(2))
    # then it is refused, with a reason, and the state is unchanged
    [refused] = events(result.outbound)
    assert isinstance(refused, lc.CapacitySetRefused)
    assert (refused.requested, refused.on_hand, refused.reserved) == (2, 5, 3)
    assert "3 units are reserved" in refused.reason
    assert ledger.state == before


def test_set_capacity_down_to_exactly_what_is_reserved_is_allowed():
    ledger = stocked(5)
    ledger(reserve(quantity=3))
    ledger(set_capacity(3))
    assert totals(ledger) == (3, 3)
    assert ledger.state.available == 0


# --- Reserve ------------------------------------------------------------------------------


def test_reserve_within_stock_holds_units_and_answers_the_saga():
    ledger = stocked(5)
    # when saga o-1 reserves 2 units for 60 s
    result = ledger(reserve("o-1", quantity=2, ttl=60), now=T0)
    # then the answer goes to the saga's channel, keyed by the saga id
    expected = lc.Reserved(
        on_hand=5, reserved=2, reservation_id="o-1:p1", quantity=2, expires_at=at(60).isoformat()
    )
    assert commands(result.outbound) == [("order-saga", "o-1", "ledger.Reserved")]
    assert sent(result.outbound) == [expected]
    assert events(result.outbound) == [expected]
    # and the hold expires at a durable deadline
    assert ledger.record.deadlines == {"expire:o-1:p1": at(60)}
    assert totals(ledger) == (5, 2)
    assert ledger.state.available == 3


def test_reserve_beyond_what_is_available_is_rejected_with_a_reason():
    ledger = stocked(5)
    ledger(reserve("o-1", quantity=3))
    result = ledger(reserve("o-2", quantity=3))
    [rejected] = sent(result.outbound)
    assert isinstance(rejected, lc.ReservationRejected)
    assert rejected.reservation_id == "o-2:p1"
    assert rejected.reason == "insufficient stock: requested 3, available 2"
    assert commands(result.outbound) == [("order-saga", "o-2", "ledger.ReservationRejected")]
    assert events(result.outbound) == [rejected]
    assert totals(ledger) == (5, 3)
    assert set(ledger.record.deadlines) == {"expire:o-1:p1"}


def test_two_sagas_racing_for_the_last_unit_cannot_both_win():
    ledger = stocked(1)
    first = ledger(reserve("o-a", quantity=1))
    second = ledger(reserve("o-b", quantity=1))
    answers = commands(first.outbound) + commands(second.outbound)
    assert answers == [
        ("order-saga", "o-a", "ledger.Reserved"),
        ("order-saga", "o-b", "ledger.ReservationRejected"),
    ]
    assert totals(ledger) == (1, 1)


def test_a_repeated_reserve_is_answered_again_without_a_second_hold():
    ledger = stocked(5)
    ledger(reserve("o-1", quantity=2))
    result = ledger(reserve("o-1", quantity=2))  # a new message id: not a transport duplicate
    assert [type(m) for m in sent(result.outbound)] == [lc.Reserved]
    assert events(result.outbound) == []
    assert totals(ledger) == (5, 2)


# --- Confirm ------------------------------------------------------------------------------


def test_confirm_turns_a_hold_into_a_sale():
    ledger = stocked(5)
    ledger(reserve("o-1", quantity=2))
    result = ledger(confirm("o-1"))
    assert sent(result.outbound) == [
        lc.Confirmed(on_hand=3, reserved=0, reservation_id="o-1:p1", quantity=2)
    ]
    assert totals(ledger) == (3, 0)
    assert ledger.record.deadlines == {}  # a sale does not expire


def test_a_repeated_confirm_is_answered_again_and_sells_nothing_more():
    ledger = stocked(5)
    ledger(reserve("o-1", quantity=2))
    ledger(confirm("o-1"))
    result = ledger(confirm("o-1"))
    assert [type(m) for m in sent(result.outbound)] == [lc.Confirmed]
    assert events(result.outbound) == []
    assert totals(ledger) == (3, 0)


def test_confirm_after_the_hold_expired_is_refused():
    ledger = stocked(5)
    ledger(reserve("o-1", quantity=2, ttl=60))
    ledger(tick(P), now=at(60))
    result = ledger(confirm("o-1"), now=at(61))
    [refused] = sent(result.outbound)
    assert isinstance(refused, lc.ConfirmRefused)
    assert refused.reason == "reservation expired"
    assert totals(ledger) == (5, 0)


def test_confirm_of_an_unknown_reservation_is_refused():
    result = stocked(5)(confirm("o-9"))
    [refused] = sent(result.outbound)
    assert isinstance(refused, lc.ConfirmRefused)
    assert refused.reason == "unknown reservation"


# --- expiry -------------------------------------------------------------------------------


def test_an_expired_hold_is_released_and_the_saga_that_made_it_is_told():
    # given saga o-1 holds 2 units for 60 s
    ledger = stocked(5)
    ledger(reserve("o-1", quantity=2, ttl=60))
    # when a tick (which carries no saga id and no reply channel) arrives after the TTL
    result = ledger(tick(P), now=at(75))
    # then the hold is gone and o-1 hears about it on its own channel
    released = lc.Released(
        on_hand=5, reserved=0, reservation_id="o-1:p1", quantity=2, reason="expired"
    )
    assert commands(result.outbound) == [("order-saga", "o-1", "ledger.Released")]
    assert sent(result.outbound) == [released]
    assert events(result.outbound) == [released]
    assert totals(ledger) == (5, 0)


# --- Cancel -------------------------------------------------------------------------------


def test_cancel_of_a_held_reservation_releases_it():
    ledger = stocked(5)
    ledger(reserve("o-1", quantity=2))
    result = ledger(cancel("o-1"))
    assert sent(result.outbound) == [
        lc.Released(on_hand=5, reserved=0, reservation_id="o-1:p1", quantity=2, reason="cancelled")
    ]
    assert ledger.record.deadlines == {}


def test_cancel_of_a_confirmed_reservation_gives_the_units_back():
    ledger = stocked(5)
    ledger(reserve("o-1", quantity=2))
    ledger(confirm("o-1"))
    result = ledger(cancel("o-1"))
    assert sent(result.outbound) == [
        lc.Released(on_hand=5, reserved=0, reservation_id="o-1:p1", quantity=2, reason="refunded")
    ]
    assert totals(ledger) == (5, 0)


def test_a_second_cancel_gives_nothing_back_twice():
    ledger = stocked(5)
    ledger(reserve("o-1", quantity=2))
    ledger(confirm("o-1"))
    ledger(cancel("o-1"))
    result = ledger(cancel("o-1"))
    assert result.outbound == ()
    assert totals(ledger) == (5, 0)


def test_a_cancel_before_its_reserve_leaves_a_tombstone_that_refuses_the_late_reserve():
    # given a cancel that overtook its reserve
    ledger = stocked(5)
    assert ledger(cancel("o-1")).outbound == ()
    # when the reserve arrives
    result = ledger(reserve("o-1", quantity=2))
    # then it is answered, but not with Reserved, and nothing is held
    [answer] = sent(result.outbound)
    assert commands(result.outbound) == [("order-saga", "o-1", answer.TYPE)]
    assert not isinstance(answer, lc.Reserved)
    assert totals(ledger) == (5, 0)
    assert ledger.record.deadlines == {}


# --- invariants under random traffic ------------------------------------------------------


class Books:
    """What the published facts say; the ledger's state must always agree with them."""

    def __init__(self) -> None:
        self.on_hand = 0
        self.holds: dict[str, int] = {}
        self.stocked = 0  # units ever added by SetCapacity
        self.sold = 0
        self.refunded = 0
        self.sequence = 0

    def read(self, env: Envelope) -> None:
        assert env.sequence == self.sequence + 1, "event sequence must have no gaps"
        self.sequence = env.sequence
        fact = env.message()
        match fact:
            case lc.CapacitySet():
                self.stocked += max(0, fact.on_hand - self.on_hand)
                self.on_hand = fact.on_hand
            case lc.Reserved():
                self.holds[fact.reservation_id] = fact.quantity
            case lc.Confirmed():
                self.on_hand -= self.holds.pop(fact.reservation_id)
                self.sold += fact.quantity
            case lc.Released(reason="refunded"):
                self.on_hand += fact.quantity
                self.refunded += fact.quantity
            case lc.Released():
                assert self.holds.pop(fact.reservation_id) == fact.quantity
        assert (fact.on_hand, fact.reserved) == (self.on_hand, sum(self.holds.values()))


def _random_command(rnd: random.Random, i: int, history: list[Envelope]) -> Envelope:
    saga = f"o-{rnd.randint(i // 4, i // 4 + 5)}"  # a sliding window of live sagas
    roll = rnd.random()
    if roll < 0.1:
        return set_capacity(rnd.randint(0, 8))
    if roll < 0.45:
        return reserve(saga, quantity=rnd.randint(1, 4), ttl=rnd.choice([10, 30, 120]))
    if roll < 0.65:
        return confirm(saga)
    if roll < 0.8:
        return cancel(saga)
    if roll < 0.9 or not history:
        return tick(P)
    return rnd.choice(history)  # a redelivery


@pytest.mark.parametrize("seed", range(8))
def test_random_traffic_never_oversells_and_the_facts_tell_the_whole_story(seed):
    rnd = random.Random(seed)
    record: Record | None = None
    books = Books()
    history: list[Envelope] = []
    now = T0
    for i in range(400):
        now += timedelta(seconds=rnd.choice([0, 0, 1, 2, 5]))
        env = _random_command(rnd, i, history)
        history.append(env)
        result = step(LEDGER, record, env, now)
        record = result.record
        state = record.state
        for event in event_envelopes(result.outbound):
            books.read(event)
        assert 0 <= state.reserved <= state.on_hand
        assert (state.on_hand, state.holds.keys()) == (books.on_hand, books.holds.keys())
        assert set(record.deadlines) == {f"expire:{rid}" for rid in state.holds}
        assert books.sold <= books.stocked + books.refunded
    assert books.sold > 0 and books.sequence > 50  # the traffic did exercise the ledger


def test_a_confirm_after_the_ttl_is_refused_even_before_the_expiry_tick():
    # The tick may be late (worker outage, backlog); the TTL must hold regardless.
    record = step(LEDGER, None, set_capacity(3), at(0)).record
    record = step(LEDGER, record, reserve("o-1", quantity=2, ttl=10), at(0)).record
    result = step(LEDGER, record, confirm("o-1"), at(11))
    replies = [
        type(m).__name__
        for m in (o.envelope.message() for o in result.outbound if o.channel != "events")
    ]
    assert replies == ["Released", "ConfirmRefused"]
    assert (result.record.state.on_hand, result.record.state.reserved) == (3, 0)


def test_released_on_expiry_names_the_saga_that_held_it():
    record = step(LEDGER, None, set_capacity(3), at(0)).record
    record = step(LEDGER, record, reserve("o-7", quantity=1, ttl=5), at(0)).record
    result = step(LEDGER, record, tick(P), at(6))
    [event] = event_envelopes(result.outbound)
    assert (event.type, event.saga_id) == ("ledger.Released", "o-7")


def test_closed_reservations_keep_the_newest_window_with_a_repeat_moved_last():
    ledger = Driver(CapacityLedger(name="inventory", entity_type="product", closed_window=3))
    ledger(set_capacity(100))
    for saga in ("o-1", "o-2", "o-3", "o-4"):
        ledger(reserve(saga, quantity=1))
        ledger(confirm(saga))
    assert list(ledger.state.closed) == ["o-2:p1", "o-3:p1", "o-4:p1"]
    ledger(reserve("o-5", quantity=1))
    ledger(cancel("o-5"))
    ledger(reserve("o-6", quantity=1))
    ledger(confirm("o-6"))
    assert list(ledger.state.closed) == ["o-4:p1", "o-5:p1", "o-6:p1"]
    assert ledger.state.closed["o-5:p1"].outcome == "cancelled"


def test_closed_reservations_older_than_the_retention_are_forgotten_the_rest_kept():
    ledger = Driver(LEDGER_10S)
    ledger(set_capacity(100), at(0))
    for i, second in enumerate((0, 4, 8)):
        ledger(reserve(f"o-{i}", quantity=1), at(second))
        ledger(confirm(f"o-{i}"), at(second))
    assert list(ledger.state.closed) == ["o-0:p1", "o-1:p1", "o-2:p1"]
    ledger(reserve("o-3", quantity=1), at(13))
    ledger(confirm("o-3"), at(13))  # 13 s: o-0 (closed at 0) is past 10 s, o-1 (4) is not
    assert list(ledger.state.closed) == ["o-1:p1", "o-2:p1", "o-3:p1"]
    assert ledger.state.closed["o-3:p1"] == Closed("confirmed", 1, int(at(13).timestamp()))


def test_a_repeat_within_the_retention_is_answered_as_before_and_one_after_it_is_unknown():
    ledger = Driver(LEDGER_10S)
    ledger(set_capacity(5), at(0))
    ledger(reserve("o-1", quantity=2), at(0))
    ledger(confirm("o-1"), at(0))
    ledger(reserve("o-2", quantity=1), at(9))  # a close at 9 s prunes nothing yet
    ledger(cancel("o-2"), at(9))
    repeat = ledger(
        envelope(lc.Confirm(reservation_id="o-1:p1"), key=P, saga_id="o-1", reply_to="order-saga"),
        at(9),
    )
    assert [type(m).__name__ for m in sent(repeat.outbound)] == ["Confirmed"]
    ledger(reserve("o-3", quantity=1), at(20))
    ledger(cancel("o-3"), at(20))  # prunes o-1 (0) and o-2 (9): both past 10 s at 20 s
    assert list(ledger.state.closed) == ["o-3:p1"]
    late = ledger(
        envelope(lc.Confirm(reservation_id="o-1:p1"), key=P, saga_id="o-1", reply_to="order-saga"),
        at(20),
    )
    [answer] = sent(late.outbound)
    assert isinstance(answer, lc.ConfirmRefused) and answer.reason == "unknown reservation"
    assert totals(ledger) == (3, 0)  # the late confirm sold nothing


def test_a_hot_products_record_stays_the_same_size_however_long_its_history():
    """Ten sales a second for twenty times the retention, far under the window: the age
    alone bounds what the ledger remembers, and the record written with every batch holds
    only its histories' tails (under CHUNK entries each), whatever the history's length:
    the machinery's 500 ``seen`` ids alone were ~20 KB when stored inline."""
    ledger = Driver(CapacityLedger(name="inventory", entity_type="product", retention=_5S))
    ledger(set_capacity(10**6), at(0))
    sizes, held = [], []
    for i in range(1000):
        ledger(reserve(f"{i:032x}", quantity=1), at(i / 10))
        ledger(confirm(f"{i:032x}"), at(i / 10))
        sizes.append(len(ledger.record.encode()))
        held.append(len(ledger.state.closed))
    assert max(held[300:]) <= 61  # 5 s at 10/s, with whole-second ages
    assert len(ledger.record.seen) == 500
    assert max(sizes) <= 4_500  # ~31 ids and ~31 closed reservations at most
    assert max(sizes[:50]) >= max(sizes[-50:]) - 200  # no growth from start to end


def test_a_record_stored_before_ages_still_reads_and_its_entries_age_out_by_the_window():
    old = (
        '{"state": {"on_hand": 3, "holds": {}, "closed": {"o-1:p1": {"outcome": "confirmed",'
        ' "quantity": 2}}}, "seen": [], "sequence": 4, "deadlines": {}}'
    )
    record = Record.codec(LedgerState).model_validate_json(old)
    assert record.state.closed["o-1:p1"] == Closed("confirmed", 2, 0)
    result = step(LEDGER, record, confirm("o-1"), at(0))
    [answer] = sent(result.outbound)
    assert isinstance(answer, lc.Confirmed)  # still answered as a sale
    later = step(LEDGER_10S, result.record, reserve("o-2", quantity=1), at(3600))
    later = step(LEDGER_10S, later.record, cancel("o-2"), at(3600))
    assert "o-1:p1" in later.record.state.closed  # unknown age: only the window removes it


_5S = timedelta(seconds=5)
LEDGER_10S = CapacityLedger(
    name="inventory", entity_type="product", retention=timedelta(seconds=10)
)
