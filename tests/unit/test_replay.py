"""The replay's pure core over histories the unit tests' bus records: the unchanged code
decides every decision again identically, and a changed rule, a skipped compensation or a
shorter timeout diverges on exactly the sagas it touches."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import replace
from datetime import timedelta
from decimal import Decimal
from typing import Any

import pytest

from sagas.contracts import ledger as lc
from sagas.contracts import orders as oc
from sagas.definitions.order_saga import OrderSaga
from sagas.machinery.process import Process
from sagas.machinery.replay import Candidate, KeyHistory, Recording, Replay, replay_all
from sagas.machinery.replay_compare import Sent, differences
from sagas.machinery.step import EVENTS_CHANNEL
from sagas.participants.ledger import CapacityLedger
from sagas.participants.payment import PaymentGateway, PaymentPolicy

from .helpers import Bus, at, envelope
from .replay_bug import ForgetfulOrderSaga

pytestmark = pytest.mark.unit

LIMIT = Decimal("100")


def definitions(saga: OrderSaga | None = None, limit: Decimal = LIMIT) -> tuple[Process[Any], ...]:
    return (
        saga or OrderSaga(),
        CapacityLedger(name="inventory", entity_type="product"),
        PaymentGateway(policy=PaymentPolicy(max_amount=limit)),
    )


def place(bus: Bus, order_id: str, method: str = "card", price: str = "10.00", **qty: int) -> None:
    lines = tuple(
        oc.OrderLine(product_id=p, quantity=q, unit_price=Decimal(price)) for p, q in qty.items()
    )
    cmd = oc.PlaceOrder(customer_id="c1", lines=lines, payment=oc.PaymentDetails(method=method))
    bus.send("order-saga", envelope(cmd, key=order_id, saga_id=order_id))


def traffic() -> Bus:
    """Orders that confirm, are declined (method or amount), run out of stock, are
    cancelled, time out while the gateway is down, and one delivered twice."""
    bus = Bus.of(*definitions())
    for product, units in {"p1": 50, "p2": 50, "p3": 1}.items():
        bus.send("inventory", envelope(lc.SetCapacity(on_hand=units), key=product))
    place(bus, "ok-1", p1=2)
    place(bus, "ok-2", p1=1, p2=3)
    place(bus, "big-1", price="30.00", p1=3)  # 90: under the limit
    place(bus, "big-2", price="30.00", p2=3, p1=1)  # 120: over it, declined
    place(bus, "dec-1", method="decline", p1=1, p2=1)
    place(bus, "out-1", p3=1)
    place(bus, "out-2", p1=1, p3=1)  # p3 is gone: p1 is released
    bus.paused.add("inventory")
    place(bus, "cancel-1", p2=1)
    bus.send("order-saga", envelope(oc.CancelOrder(reason="changed mind"), key="cancel-1"))
    bus.resume("inventory")
    twice = envelope(oc.CancelOrder(reason="too late"), key="ok-1")
    bus.send("order-saga", twice)
    bus.send("order-saga", twice)
    # the gateway answers one order after 20 s, the other after 40 s: past its timeout
    bus.hold = lambda out: out.channel == "payment" and out.envelope.key in ("slow-1", "late-1")
    place(bus, "slow-1", p1=1)
    place(bus, "late-1", p2=2)
    bus.hold = lambda out: out.channel == "payment" and out.envelope.key == "late-1"
    bus.resume("payment", at(20))
    bus.tick(at(31))
    bus.hold = None
    bus.resume("payment", at(40))
    return bus


def recorded(bus: Bus) -> tuple[list[KeyHistory], Recording]:
    inputs: dict[tuple[str, str], list[Any]] = defaultdict(list)
    for channel, env in bus.delivered:
        inputs[(channel, env.key)].append(env)
    sent = [Sent(c, e) for c, e in bus.delivered]
    sent += [Sent(EVENTS_CHANNEL, e) for e in bus.published]
    histories = [KeyHistory(c, k, tuple(envs)) for (c, k), envs in inputs.items()]
    return histories, Recording(sent)


def run(
    bus: Bus, candidates: tuple[Process[Any], ...], baselines: tuple[Process[Any], ...] = ()
) -> Replay:
    histories, recording = recorded(bus)
    mine = {p.name: Candidate(p) for p in candidates}
    theirs = {p.name: Candidate(p) for p in baselines} if baselines else None
    return replay_all(histories, mine, recording, theirs, until=at(3600))


def diverging(replay: Replay) -> dict[tuple[str, str], str]:
    return {(k.channel, k.key): k.first.kind for k in replay.keys if k.first is not None}


def test_the_unchanged_definitions_decide_every_recorded_decision_again_identically() -> None:
    bus = traffic()
    replay = run(bus, definitions())
    assert diverging(replay) == {}
    assert [k.key for k in replay.keys if k.not_replayable] == []
    inputs = {e.message_id for _, e in bus.delivered if e.type != "system.Tick"}
    sent = [e for _, e in bus.delivered] + bus.published
    fired = {e.causation_id for e in sent if e.causation_id not in {None, *inputs}}
    assert len(fired) == 1  # late-1's step timeout
    assert sum(k.decisions for k in replay.keys) == len(inputs) + len(fired)
    assert replay.unattributed == 0
    # and with itself as the baseline too: deadlines compared, none differ
    assert diverging(run(bus, definitions(), definitions())) == {}


def test_a_lower_payment_limit_diverges_on_exactly_the_payments_between_the_two_limits() -> None:
    bus = traffic()
    replay = run(bus, definitions(limit=Decimal("50")), definitions())
    amounts = {
        e.key: Decimal(e.payload["amount"])
        for _, e in bus.delivered
        if e.type == "payment.Authorize"
    }
    between = {k for k, a in amounts.items() if Decimal("50") < a <= LIMIT}
    above = {k for k, a in amounts.items() if a > LIMIT}
    assert (between, above) == ({"big-1"}, {"big-2"})
    # an order over both limits is declined either way: only the reason, which quotes the
    # limit, differs
    assert diverging(replay) == {
        **{("payment", k): "payment.Authorized -> payment.Declined" for k in between},
        **{("payment", k): "payment.Declined differs (payload.reason)" for k in above},
    }
    ended = [k for k in replay.keys if k.status_before != k.status_after]
    assert [(k.channel, k.key, k.status_before, k.status_after) for k in ended] == [
        ("payment", "big-1", "CAPTURED", "DECLINED")
    ]
    assert ended[0].first is not None and ended[0].first.what == "payment.Authorize"


def test_a_skipped_compensation_diverges_on_exactly_the_sagas_that_compensated() -> None:
    bus = traffic()
    replay = run(bus, definitions(saga=ForgetfulOrderSaga()), definitions())
    compensated = {
        e.saga_id
        for channel, e in bus.delivered
        if channel in ("inventory", "payment") and e.type in (lc.Cancel.TYPE, "payment.Void")
    }
    assert compensated == {"dec-1", "out-2", "cancel-1", "late-1", "big-2"}
    found = diverging(replay)
    assert set(found) == {("order-saga", k) for k in compensated}
    assert all(kind.startswith("missing ") for kind in found.values())


def test_a_shorter_step_timeout_diverges_on_exactly_the_sagas_whose_step_took_longer() -> None:
    bus = traffic()
    shorter = OrderSaga(step_timeout=timedelta(seconds=10))
    replay = run(bus, definitions(saga=shorter), definitions())
    # slow-1 waited 20 s for its payment (it confirmed), late-1 timed out after 30 s; every
    # other order's steps took no time on the bus: only those two would have timed out
    assert set(diverging(replay)) == {("order-saga", "slow-1"), ("order-saga", "late-1")}
    for key in ("slow-1", "late-1"):
        first = next(k.first for k in replay.keys if k.key == key and k.channel == "order-saga")
        assert first is not None and first.what == "deadline"
        assert first.at == at(10) and first.recorded == ()
        said = [s.envelope.payload for s in first.replayed if s.channel == "events"]
        assert said == [{"status": "CANCELLED", "reason": "timeout"}]
    ended = {
        k.key: (k.status_before, k.status_after)
        for k in replay.keys
        if k.channel == "order-saga" and k.status_before != k.status_after
    }
    assert ended == {"slow-1": ("CONFIRMED", "CANCELLED")}
    # every order that waited on a step set its deadline otherwise: not a divergence
    waited = {k.key for k in replay.keys if k.channel == "order-saga" and k.deadlines_otherwise}
    assert waited == {e.key for c, e in bus.delivered if e.type == oc.PlaceOrder.TYPE}


def test_a_key_whose_start_is_past_retention_is_not_replayable_and_says_why() -> None:
    bus = traffic()
    histories, recording = recorded(bus)
    cut = [
        replace(h, inputs=h.inputs[1:]) if h.key == "ok-2" and h.channel == "order-saga" else h
        for h in histories
    ]
    truncated = [replace(h, truncated=7) if h.key == "p3" else h for h in cut]
    candidates = {p.name: Candidate(p) for p in definitions()}
    replay = replay_all(truncated, candidates, recording)
    why = {k.key: k.not_replayable for k in replay.keys if k.not_replayable}
    assert set(why) == {"ok-2"}
    assert "first recorded fact is number 2" in (why["ok-2"] or "")
    # p3's first input (its capacity) starts its stream, so a truncated partition is fine;
    # a participant key whose first input is a stray answer is not
    stray = [replace(h, truncated=7, inputs=h.inputs[1:]) if h.key == "p3" else h for h in cut]
    replay = replay_all(stray, candidates, recording)
    assert {k.key for k in replay.keys if k.not_replayable} == {"ok-2", "p3"}


def test_differences_name_what_is_missing_extra_renamed_or_changed() -> None:
    def sent(type_: str, mid: str, **payload: Any) -> Sent:
        env = envelope(oc.CancelOrder(reason="x"), key="k", message_id=mid)
        return Sent("c", env.model_copy(update={"type": type_, "payload": payload}))

    a, b = sent("t.A", "1", n=1), sent("t.B", "2", n=1)
    assert differences([a, b], [a, b]) == []
    assert differences([a, b], [b]) == ["missing t.A"]
    assert differences([a], [a, b]) == ["extra t.B"]
    assert differences([a], [sent("t.A", "9", n=1)]) == ["t.A sent under another id"]
    assert differences([a], [sent("t.A", "1", n=2)]) == ["t.A differs (payload.n)"]
    assert differences([a], [sent("t.C", "1", n=1)]) == ["t.A -> t.C"]
