"""The reservation primitive: hold / commit / release / refuse, idempotent, with tombstones
and a bounded memory of closed reservations."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from decimal import Decimal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sagas.machinery.reservations import Closed, Outcome, Reservations, Retention, epoch_seconds

from .helpers import at

pytestmark = pytest.mark.unit

KEEP = Retention(period=timedelta(seconds=30), window=3)
FOREVER = Retention(period=timedelta(days=365), window=1000)
IDS = [f"r{i}" for i in range(6)]


@dataclass(frozen=True)
class Op:
    name: str
    rid: str
    amount: int
    after: float
    """Seconds since the previous operation."""


ops = st.lists(
    st.builds(
        Op,
        st.sampled_from(["hold", "commit", "release", "refuse", "expire"]),
        st.sampled_from(IDS),
        st.integers(0, 6),
        st.sampled_from([0, 0, 1, 7, 40]),
    ),
    max_size=40,
)


def apply(
    state: Reservations[int], op: Op, seconds: float, keep: Retention = KEEP
) -> tuple[Reservations[int], tuple[Outcome[int], ...]]:
    now = at(seconds)
    match op.name:
        case "hold":
            ttl = None if op.amount % 2 else timedelta(seconds=20)
            new, outcome = state.hold(op.rid, op.amount, now, keep, ttl=ttl)
        case "commit":
            # Even ids keep their commitment open (a seat), odd ones consume it (a sale).
            keep_open = int(op.rid[1:]) % 2 == 0
            new, outcome = state.commit(op.rid, now, keep, keep_open=keep_open)
        case "release":
            new, outcome = state.release(op.rid, now, keep)
        case "refuse":
            new, outcome = state.refuse(op.rid, op.amount, now, keep)
        case _:
            return state.expire(now, keep)
    return new, (outcome,)


def consumed_by(state: Reservations[int], outcomes: tuple[Outcome[int], ...]) -> int:
    """What these outcomes took out of on_hand for good (``state`` is the value before)."""
    consumed = 0
    for o in outcomes:
        if o.repeat or o.amount is None:
            continue
        if o.kind == "confirmed":
            consumed += o.amount
        elif o.kind == "refunded" and o.rid not in state.committed:  # a consumed one's
            consumed -= o.amount
    return consumed


# --- properties ---------------------------------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 12), ops)
def test_available_held_and_committed_always_add_up_to_what_was_on_hand(capacity, sequence):
    state, seconds, consumed = Reservations[int](on_hand=capacity), 0.0, 0
    for op in sequence:
        seconds += op.after
        before, (state, outcomes) = state, apply(state, op, seconds)
        consumed += consumed_by(before, outcomes)
        assert state.available + state.held + state.committed_total + consumed == capacity
        assert 0 <= state.held + state.committed_total <= state.on_hand


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 12), ops)
def test_an_operation_repeated_answers_as_the_first_time_and_changes_nothing(capacity, sequence):
    state, seconds = Reservations[int](on_hand=capacity), 0.0
    for op in sequence:
        seconds += op.after
        state, outcomes = apply(state, op, seconds)
        if op.name == "expire":
            continue
        again, [repeat] = apply(state, op, seconds)
        [first] = outcomes
        assert (repeat.kind, repeat.amount, repeat.repeat) == (first.kind, first.amount, True)
        assert again == state


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 12), ops, st.sampled_from(IDS), st.integers(0, 6))
def test_a_release_before_its_hold_refuses_the_hold_that_comes_later(
    capacity, sequence, rid, amount
):
    state, seconds = Reservations[int](on_hand=capacity), 0.0
    for op in (o for o in sequence if o.rid != rid):
        seconds += op.after
        state, _ = apply(state, op, seconds)
    tombstoned, released = state.release(rid, at(seconds), KEEP)
    late, held = tombstoned.hold(rid, amount, at(seconds), KEEP)
    assert (released.kind, held.kind, held.repeat) == ("tombstone", "tombstone", True)
    assert late == tombstoned and late.available == state.available


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 12), ops)
def test_closed_reservations_are_kept_within_the_window_and_the_period_and_no_longer(
    capacity, sequence
):
    state, seconds = Reservations[int](on_hand=capacity), 0.0
    answers: dict[str, tuple[str, float]] = {}
    for op in sequence:
        seconds += op.after
        state, outcomes = apply(state, op, seconds)
        for outcome in outcomes:
            if outcome.kind not in ("held", "committed", "unknown") and not outcome.repeat:
                answers.pop(outcome.rid, None)  # the latest close is the newest
                answers[outcome.rid] = (outcome.kind, seconds)
    state = state.forget(at(seconds), KEEP)
    cutoff = epoch_seconds(at(seconds)) - KEEP.period.total_seconds()
    assert len(state.closed) <= KEEP.window
    assert all(closed.at >= cutoff for closed in state.closed.values())
    # Within both bounds, every closed reservation is still answered as it closed.
    for rid, (kind, closed_at) in list(answers.items())[-KEEP.window :]:
        if closed_at > seconds - KEEP.period.total_seconds():
            assert state.status(rid).kind == kind


# --- examples -----------------------------------------------------------------------------


def test_a_hold_is_refused_when_less_is_available_and_the_refusal_is_remembered():
    state, first = Reservations[int](on_hand=3).hold("a", 2, at(0), KEEP)
    state, short = state.hold("b", 2, at(0), KEEP)
    assert (first.kind, short.kind, state.available) == ("held", "rejected", 1)
    state, commit_b = state.commit("b", at(1), KEEP)
    assert (commit_b.kind, commit_b.repeat) == ("rejected", True)


def test_commit_takes_the_amount_off_hand_and_release_after_it_refunds_it():
    state, _ = Reservations[int](on_hand=5).hold("a", 2, at(0), KEEP)
    state, confirmed = state.commit("a", at(1), KEEP)
    assert (confirmed.kind, state.on_hand, state.held) == ("confirmed", 3, 0)
    state, refunded = state.release("a", at(2), KEEP)
    assert (refunded.kind, state.on_hand, state.closed["a"].outcome) == ("refunded", 5, "refunded")


def test_a_hold_with_a_ttl_expires_at_it_and_one_without_never_does():
    state, _ = Reservations[int](on_hand=5).hold("a", 1, at(0), KEEP, ttl=timedelta(seconds=10))
    state, _ = state.hold("b", 1, at(0), KEEP, saga_id="s-b", reply_to="saga")
    state, _ = state.hold("c", 1, at(1), KEEP, ttl=timedelta(seconds=5))
    early, [first] = state.expire(at(9), KEEP)
    assert (first.rid, first.kind, list(early.holds)) == ("c", "expired", ["a", "b"])
    assert state.due(at(10)) == ("c", "a")  # the earliest expiry first
    late, outcomes = state.expire(at(10), KEEP)
    assert [(o.rid, o.kind) for o in outcomes] == [("c", "expired"), ("a", "expired")]
    assert list(late.holds) == ["b"] and late.available == 4
    forever, nothing = late.expire(at(10**7), FOREVER)
    assert nothing == () and forever.holds["b"].saga_id == "s-b"


def test_amounts_may_be_decimal_and_stay_decimal_through_storage():
    money = Reservations[Decimal](on_hand=Decimal("100.00"))
    assert money.held == Decimal(0) and isinstance(money.held, Decimal)
    money, held = money.hold("t-1", Decimal("30.25"), at(0), FOREVER)
    money, _ = money.hold("t-2", Decimal("69.75"), at(0), FOREVER)
    money, short = money.hold("t-3", Decimal("0.01"), at(0), FOREVER)
    assert (held.kind, short.kind, money.available) == ("held", "rejected", Decimal("0.00"))
    money, _ = money.commit("t-1", at(1), FOREVER)
    stored = Reservations[Decimal].model_validate_json(money.model_dump_json())
    assert stored == money and stored.on_hand == Decimal("69.75")
    assert stored.closed["t-1"] == Closed("confirmed", Decimal("30.25"), epoch_seconds(at(1)))
    assert isinstance(stored.holds["t-2"].amount, Decimal)


def test_a_commitment_kept_open_counts_until_released_however_long_after():
    state, _ = Reservations[int](on_hand=10).hold("seat", 4, at(0), KEEP)
    state, kept = state.commit("seat", at(1), KEEP, keep_open=True)
    assert (kept.kind, state.on_hand, state.committed_total, state.available) == (
        "committed",
        10,
        4,
        6,
    )
    state = state.forget(at(10**6), KEEP)  # no retention applies to what is open
    assert state.status("seat").kind == "committed" and state.restock(3) is None
    state, refunded = state.release("seat", at(10**6), KEEP, note="dropped")
    assert (refunded.kind, state.available, state.status("seat").note) == (
        "refunded",
        10,
        "dropped",
    )


def test_a_commit_of_another_amount_takes_or_gives_back_the_difference():
    state, _ = Reservations[int](on_hand=10).hold("t", 2, at(0), KEEP)
    more, _ = state.commit("t", at(1), KEEP, keep_open=True, amount=5)
    less, _ = state.commit("t", at(1), KEEP, amount=1)
    assert (more.available, less.on_hand, less.available) == (5, 9, 9)
    with pytest.raises(ValueError, match="cannot be committed"):
        state.commit("t", at(1), KEEP, amount=11)


def test_a_refusal_keeps_its_note_to_answer_a_repeat_with_it():
    state, first = Reservations[int](on_hand=1).hold("a", 2, at(0), KEEP, short="only 1 left")
    state, again = state.hold("a", 1, at(1), KEEP)
    assert (first.note, again.kind, again.note) == ("only 1 left", "rejected", "only 1 left")
    state, ruled = state.refuse("b", 1, at(1), KEEP, note="already enrolled")
    assert (ruled.kind, state.available, state.status("b").note) == (
        "rejected",
        1,
        "already enrolled",
    )


def test_negative_amounts_are_a_programming_error():
    with pytest.raises(ValueError, match="never negative"):
        Reservations[int](on_hand=1).hold("a", -1, at(0), KEEP)


def test_restock_below_what_is_held_is_refused():
    state, _ = Reservations[int](on_hand=5).hold("a", 3, at(0), KEEP)
    assert state.restock(2) is None
    restocked = state.restock(3)
    assert restocked is not None and restocked.available == 0


def test_forgets_at_is_the_oldest_closing_plus_the_period():
    state, _ = Reservations[int](on_hand=5).release("a", at(4), KEEP)
    assert Reservations[int](on_hand=0).forgets_at(KEEP) is None
    assert state.forgets_at(KEEP) == at(4) + KEEP.period
    assert "a" in state.forget(at(33), KEEP).closed
    assert "a" not in state.forget(at(35), KEEP).closed


def test_receive_puts_more_on_hand_and_never_takes_any_off():
    state, _ = Reservations[Decimal](on_hand=Decimal("5.00")).hold("a", Decimal(2), at(0), KEEP)
    received = state.receive(Decimal("1.50"))
    assert (received.on_hand, received.held, received.available) == (
        Decimal("6.50"), Decimal(2), Decimal("4.50"),
    )  # fmt: skip
    with pytest.raises(ValueError, match="never negative"):
        state.receive(Decimal(-1))
