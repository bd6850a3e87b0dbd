"""The fault harness's checks on known histories: a clean run gives no violation (no false
positives from the harness itself), and each kind of damage gives exactly its violation."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import timedelta
from pathlib import Path

import pytest

from faults.checks import Observed, ReadModels, Violation, check_all, sequences
from faults.history import History
from faults.load import Attempt, EnrollAttempt
from faults.poison import POISON_CHANNELS, POISON_KINDS, PoisonRecord, build
from faults.procs import crashes
from faults.topics import Raw
from sagas.contracts import ledger as lc
from sagas.domains import enrollment as enrollment_domain
from sagas.messages import Envelope
from tests.integration.golden import expected_rows, golden_events

pytestmark = pytest.mark.unit
TOPIC = "t.events"


def _raws(events: list[Envelope]) -> list[Raw]:
    return [Raw(TOPIC, 0, offset, e.key.encode(), e.encode()) for offset, e in enumerate(events)]


def _observed(events: list[Envelope], raws: list[Raw] | None = None) -> Observed:
    """What the harness would observe if the stack had done exactly ``events``."""
    raws = _raws(events) if raws is None else raws
    want = expected_rows(events)
    history = History.of(raws, skip=set())
    attempts = []
    api_orders = {}
    for order_id, row in want.orders.items():
        attempts.append(Attempt(order_id, row.customer_id, f"k-{order_id}", {}, "card", True))
        api_orders[order_id] = {"status": row.status, "final": True}
    api_stock = {p: {"on_hand": r.on_hand, "reserved": r.reserved} for p, r in want.stock.items()}
    return Observed(
        attempts=attempts,
        api_orders=api_orders,
        stock_start=dict.fromkeys(want.stock, 20),
        api_stock=api_stock,  # type: ignore[arg-type]
        history=history,
        event_ends={0: len(raws)},
        dead_letters=[],
        poisons=[],
        read_models=ReadModels(want.orders, want.stock, want.timeline, {0: len(raws)}),
    )


def _kinds(violations: list[Violation]) -> set[str]:
    return {v.kind for v in violations}


def test_a_clean_history_has_no_violation() -> None:
    assert check_all(_observed(golden_events())) == []


def test_a_resent_copy_of_an_event_is_no_violation() -> None:
    events = golden_events()
    assert check_all(_observed(events, _raws(events + events[:30]))) == []


def test_a_lost_placement_is_an_accepted_order_not_final() -> None:
    observed = _observed(golden_events())
    observed.attempts.append(Attempt("lost", "c1", "k-lost", {"p0": 1}, "card", True))
    violations = check_all(observed)
    assert _kinds(violations) == {"accepted-order-not-final"}
    assert violations[0].subject == "order lost"


def test_two_events_with_one_sequence_are_a_conflict() -> None:
    events = golden_events()
    first = next(e for e in events if e.type == "ledger.Reserved")
    other = first.model_copy(update={"message_id": "other", "occurred_at": first.occurred_at})
    assert "sequence-conflict" in _kinds(check_all(_observed(events, _raws([*events, other]))))


@pytest.mark.parametrize(("after_s", "conflict"), [(26.0, False), (24.0, True)])
def test_a_command_refused_for_a_forgotten_key_is_no_conflict_past_the_marker_window(
    after_s: float, conflict: bool
) -> None:
    # Retired 5 s after its end, forgotten 20 s later (faults/stack.py): a command arriving
    # after that is taken as new and refused at sequence 1 again (retirement's limit).
    events = golden_events()
    key = events[0].key
    last = max(e.occurred_at for e in events if e.key == key)
    refused = events[0].model_copy(
        update={
            "message_id": "refused",
            "type": "enrollment.CommandRefused",
            "payload": {"status": "NONE", "reason": "enrollment is unknown"},
            "sequence": 1,
            "occurred_at": last + timedelta(seconds=after_s),
        }
    )
    kinds = {v.kind for v in sequences(History.of(_raws([*events, refused]), skip=set()))}
    assert ("sequence-conflict" in kinds) is conflict


def test_a_missing_event_is_a_gap() -> None:
    events = golden_events()
    index = next(i for i, e in enumerate(events) if e.type == "ledger.Confirmed")
    kinds = _kinds(check_all(_observed(events[:index] + events[index + 1 :])))
    assert "sequence-gap" in kinds


def test_a_reservation_made_twice_is_an_effect_twice() -> None:
    events = golden_events()
    first = next(e for e in events if e.type == "ledger.Reserved")
    product_events = [e for e in events if e.key == first.key]
    again = first.model_copy(
        update={"message_id": "again", "sequence": max(e.sequence or 0 for e in product_events) + 1}
    )
    assert "effect-twice" in _kinds(check_all(_observed([*events, again])))


def test_units_held_by_a_cancelled_order_are_a_missing_compensation() -> None:
    events = [e for e in golden_events() if e.type != "ledger.Released"]
    # Renumber the product streams so only the missing release is wrong, not the sequences.
    seq: dict[str, int] = {}
    renumbered = []
    for e in events:
        seq[e.key] = seq.get(e.key, 0) + 1
        renumbered.append(e.model_copy(update={"sequence": seq[e.key]}))
    assert "compensation-missing" in _kinds(check_all(_observed(renumbered)))


def test_stock_that_does_not_add_up_is_a_mismatch() -> None:
    observed = _observed(golden_events())
    product = next(iter(observed.api_stock))
    observed.api_stock[product] = {"on_hand": 999, "reserved": 0}
    assert _kinds(check_all(observed)) == {"stock-mismatch"}


def test_dead_letters_are_matched_to_poison_by_position() -> None:
    observed = _observed(golden_events())
    poison = PoisonRecord("not-json", "inventory", "t.inventory", 2, 17, "dead-letter")
    letter = {"source_topic": "t.inventory", "partition": 2, "offset": 17, "reason": "x"}
    stray = letter | {"offset": 18}
    observed.poisons = [poison]
    observed.dead_letters = [Raw("t.deadletter", 0, 0, None, json.dumps(letter).encode())]
    assert check_all(observed) == []
    observed.dead_letters.append(Raw("t.deadletter", 0, 1, None, json.dumps(stray).encode()))
    assert _kinds(check_all(observed)) == {"unexplained-dead-letter"}
    observed.dead_letters = []
    assert _kinds(check_all(observed)) == {"poison-not-dead-lettered"}


def test_a_read_model_row_that_differs_from_the_fold_is_reported() -> None:
    observed = _observed(golden_events())
    order_id, row = next(iter(observed.read_models.orders.items()))
    observed.read_models.orders[order_id] = row.model_copy(update={"status": "PENDING"})
    assert _kinds(check_all(observed)) == {"read-model-orders"}


def test_poison_on_the_event_topic_is_set_aside_by_position() -> None:
    events = golden_events()
    raws = _raws(events)
    junk = Raw(TOPIC, 0, len(raws), b"k", b"{not json")
    observed = _observed(events, [*raws, junk])
    assert _kinds(check_all(observed)) == {"malformed-event"}
    observed = replace(observed, history=History.of([*raws, junk], skip={(0, len(raws))}))
    assert check_all(observed) == []


@pytest.mark.parametrize("channel", POISON_CHANNELS)
@pytest.mark.parametrize("kind", POISON_KINDS)
def test_every_poison_is_invalid_where_it_lands(kind: str, channel: str) -> None:
    """Each poison breaks the contract it claims to (so a dead letter is the right answer);
    the one well-formed event of an unknown type is applied as skipped and dead-lettered."""
    from readside.triage import Rejected, triage, unknown_type_reason

    key, value, expect = build(kind, channel, 1)
    if channel == "events":
        try:
            outcome = triage(key, value)
        except RecursionError:  # invalid too; whether the projector survives it is the run's
            assert expect == "dead-letter"
            return
        lettered = isinstance(outcome, Rejected) or unknown_type_reason(outcome) is not None
        assert lettered == (expect == "dead-letter"), outcome
        return
    assert expect == "dead-letter"
    try:
        envelope = Envelope.decode(value)
        envelope.message()
        assert key is None or key.decode() != envelope.key, "a valid command is no poison"
    except (ValueError, RecursionError):
        pass


def test_a_capacity_fact_carries_totals() -> None:
    # The stock check reads on_hand/reserved from a product's last fact: every ledger fact
    # type must carry them.
    for fact in (lc.Reserved, lc.Confirmed, lc.Released, lc.CapacitySet):
        assert {"on_hand", "reserved"} <= set(fact.model_fields)


# --- enrollments --------------------------------------------------------------------------


def _enrolling(events: list[Envelope] | None = None) -> Observed:
    """A run whose event topic holds the golden orders and the enrollment story, the story's
    enrollments accepted, its read models equal to the fold."""
    from sagas.catalog import model_for
    from sagas.projections.entity import fold_entity
    from tests.unit.test_enrollment_read_models import story

    told = story() if events is None else events
    observed = _observed(golden_events() + told)
    history = observed.history
    tables: dict[str, dict[str, object]] = {
        m.name: {} for m in enrollment_domain.DOMAIN.read_models
    }
    for key in history.by_entity:
        model = model_for(key.split(":", 1)[0])
        if model is not None and model.name in tables:
            row = fold_entity(model.entity_type, None, history.contiguous(key)).row
            tables[model.name][key.split(":", 1)[1]] = row
    observed.read_models.tables = tables
    for key in history.entities("enrollment"):
        enrollment = key.split(":", 1)[1]
        first = history.stream(key)[0].payload
        attempt = EnrollAttempt(enrollment, first["student_id"], first["course_id"], "k", True)
        attempt.accepted = True
        observed.enrollments.append(attempt)
        observed.api_enrollments[enrollment] = {"status": history.saga_status(key)}
    return observed


def test_a_clean_enrollment_story_has_no_violation() -> None:
    observed = _enrolling()
    # Every read model of the enrollment domain holds rows of the story.
    tables = observed.read_models.tables
    assert len(observed.enrollments) == 5
    assert all(tables[m.name] for m in enrollment_domain.DOMAIN.read_models)
    assert check_all(observed) == []


def test_an_accepted_enrollment_never_seen_is_not_settled() -> None:
    observed = _enrolling()
    lost = EnrollAttempt("lost", "s1", "alg", "k-lost", True, accepted=True)
    observed.enrollments.append(lost)
    assert _kinds(check_all(observed)) == {"accepted-enrollment-not-settled"}


def test_an_api_status_other_than_the_topic_s_is_reported() -> None:
    observed = _enrolling()
    observed.api_enrollments["e0"] = {"status": "ENROLLED"}
    assert _kinds(check_all(observed)) == {"api-disagrees-with-events"}


def test_a_course_fact_over_capacity_is_an_overbooking() -> None:
    from tests.unit.test_enrollment_read_models import story

    events = story()
    index = next(i for i, e in enumerate(events) if e.type == "course.SeatHeld")
    held = events[index]
    events[index] = held.model_copy(update={"payload": held.payload | {"held": 3}})
    observed = _enrolling(events)
    observed.read_models.tables = {}  # the roster row differs too: not what this test shows
    assert _kinds(check_all(observed)) == {"course-overbooked"}


def test_an_old_seat_never_released_after_a_transfer_is_two_confirmed_seats() -> None:
    from tests.unit.test_enrollment_read_models import story

    events = story()
    index = next(
        i
        for i, e in enumerate(events)
        if e.type == "course.SeatReleased" and e.payload["reservation_id"] == "e1:t0"
    )
    release = events[index]
    events[index] = release.model_copy(
        update={"payload": release.payload | {"reason": "cancelled"}}
    )
    violations = check_all(_enrolling(events))
    assert _kinds(violations) == {"enrollment-seats"}
    assert "confirmed seats in ['alg', 'poe']" in violations[0].detail


def test_a_roster_row_that_differs_from_the_fold_is_reported() -> None:
    observed = _enrolling()
    roster = observed.read_models.tables["course_roster"]
    roster["alg"] = roster["alg"].model_copy(update={"held": 1})  # type: ignore[attr-defined]
    assert _kinds(check_all(observed)) == {"read-model-course_roster"}


def test_credits_over_the_maximum_and_held_at_rest_are_reported() -> None:
    from tests.unit.test_enrollment_read_models import story

    events = story()
    student = max(
        (i for i, e in enumerate(events) if e.key == "student:s4"),
        key=lambda i: events[i].sequence or 0,
    )
    last = events[student]
    events[student] = last.model_copy(update={"payload": last.payload | {"credits_held": 7}})
    observed = _enrolling(events)
    observed.read_models.tables = {}
    assert _kinds(check_all(observed)) == {"credits-overdrawn", "credits-held-at-rest"}


def test_a_crashed_service_in_a_log_is_found(tmp_path: Path) -> None:
    crashed, clean = tmp_path / "worker3-1.log", tmp_path / "worker1-1.log"
    crashed.write_text(
        "[2026-11-28 15:30:52,635] [29462] [INFO] [^---Recovery]: Starting standby partitions...\n"
        "[2026-11-28 15:30:52,637] [29462] [ERROR] [^---Recovery]: Crashed"
        " reason=ValueError('Offset must be a positive integer')\n"
    )
    clean.write_text("[2026-11-28 15:30:52,644] [29462] [CRITICAL] exiting: frozen\n")
    found = crashes([clean, crashed, tmp_path / "never-written.log"])
    assert [log for log, _ in found] == ["worker3-1.log"]
    assert "Offset must be a positive integer" in found[0][1]
