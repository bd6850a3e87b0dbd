"""The replay's edge without Kafka: records grouped into keys' histories, the candidates a
command line chooses, and the report it prints."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from decimal import Decimal

import pytest

from runtime.settings import Settings
from sagaline.wiring import build_processes
from sagas.contracts import orders as oc
from sagas.definitions.order_saga import OrderSaga
from sagas.machinery.replay import Candidate, replay_all
from services.replay.candidates import CandidateError, changed_settings, choose
from services.replay.history import Raw, assemble
from services.replay.report import render, summarize

from .test_replay import definitions, recorded, run, traffic

pytestmark = pytest.mark.unit


def test_records_group_into_each_keys_inputs_and_a_partition_that_lost_records_is_noted() -> None:
    bus = traffic()
    raws = [Raw(c, len(e.key) % 2, e.encode()) for c, e in bus.delivered]
    raws += [Raw("events", 0, e.encode()) for e in bus.published]
    raws.append(Raw("inventory", 1, b"not json"))
    history = assemble(raws, {("inventory", 0): 5, ("events", 0): 3})
    histories, _ = recorded(bus)
    assert {(h.channel, h.key): tuple(h.inputs) for h in history.histories} == {
        (h.channel, h.key): tuple(h.inputs) for h in histories
    }
    truncated = {h.key for h in history.histories if h.truncated}
    assert truncated == {k for c, e in bus.delivered if c == "inventory" for k in [e.key]
                         if len(k) % 2 == 0}  # fmt: skip
    assert (history.undecodable, history.facts_truncated) == (1, (0,))
    assert history.records == len(bus.delivered) + len(bus.published) + 1


def test_the_working_tree_unchanged_has_no_baseline_and_a_change_is_compared_with_it() -> None:
    settings = Settings()
    assert choose(settings, build_processes).baselines is None
    chosen = choose(settings, build_processes, overrides={"payment_max_amount": "50"})
    assert chosen.baselines is not None
    mine = chosen.candidates["payment"].process
    theirs = chosen.baselines["payment"].process
    assert (mine.policy.max_amount, theirs.policy.max_amount) == (  # type: ignore[attr-defined]
        Decimal("50"),
        settings.payment_max_amount,
    )
    bug = choose(settings, build_processes, "tests.unit.replay_bug")
    assert type(bug.candidates["order-saga"].process).__name__ == "ForgetfulOrderSaga"
    assert type(bug.candidates["inventory"].process).__name__ == "CapacityLedger"


def test_a_setting_or_module_that_does_not_exist_is_a_sentence() -> None:
    with pytest.raises(CandidateError, match="no_such_thing: no such setting"):
        changed_settings(Settings(), {"no_such_thing": "1"})
    with pytest.raises(CandidateError, match="--set"):
        changed_settings(Settings(), {"step_timeout_s": "soon"})
    with pytest.raises(CandidateError, match="no processes"):
        choose(Settings(), build_processes, "sagas.ids")


def test_the_report_groups_divergences_and_shows_the_first_side_by_side() -> None:
    bus = traffic()
    replay = run(bus, definitions(limit=Decimal("50")), definitions())
    summary = summarize(replay, compared_with_baseline=True)
    text = render(summary)
    assert summary.diverging == 2 and summary.identical == summary.replayed - 2
    assert "payment  in NEW  payment.Authorized -> payment.Declined  x1" in text
    assert "payment: CAPTURED -> DECLINED: 1" in text
    side_by_side = [line.split(" | ") for line in text.splitlines() if " | " in line]
    assert ["-> order-saga payment.Authorized big-1", "-> order-saga payment.Declined big-1"] in [
        [a.strip(), b.strip()] for a, b in side_by_side
    ]
    as_json = summary.to_json()
    assert as_json["ended_differently_keys"] == {"payment: CAPTURED -> DECLINED": ["big-1"]}


def test_keys_not_replayable_are_counted_with_why_never_dropped() -> None:
    bus = traffic()
    histories, recording = recorded(bus)
    cut = [
        replace(h, inputs=h.inputs[1:]) if h.key == "ok-2" and h.channel == "order-saga" else h
        for h in histories
    ]
    candidates = {p.name: Candidate(p) for p in definitions()}
    summary = summarize(replay_all(cut, candidates, recording), compared_with_baseline=False)
    assert list(summary.not_replayable) == ["order-saga/ok-2"]
    assert summary.replayed == len(histories) - 1 == summary.identical
    assert "1 x its first recorded fact is number N" in render(summary)


def test_a_shorter_timeout_reports_its_timeouts_and_counts_the_deadlines_set_otherwise() -> None:
    bus = traffic()
    shorter = OrderSaga(step_timeout=timedelta(seconds=10))
    summary = summarize(run(bus, definitions(saga=shorter), definitions()), True)
    lines = render(summary).splitlines()
    groups = [line for line in lines if line.startswith("order-saga  in ")]
    assert groups == ["order-saga  in AUTHORIZING  extra ledger.Cancel  x2"], groups
    assert lines[lines.index("would have ended differently: 1") + 1 :][:1] == [
        "  order-saga: CONFIRMED -> CANCELLED: 1"
    ]
    placed = {e.key for _, e in bus.delivered if e.type == oc.PlaceOrder.TYPE}
    assert summary.deadlines_otherwise == len(placed)
    assert summary.to_json()["deadlines_set_otherwise"] == len(placed)
    assert any(line.endswith(f"before the end of the recording): {len(placed)}") for line in lines)
