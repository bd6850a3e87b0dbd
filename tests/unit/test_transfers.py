"""Money transfers, the third domain: the transfer saga and the accounts it moves money
between, run together on the unit tests' bus (wire formats and stored records included)."""

from __future__ import annotations

import random
from datetime import timedelta
from decimal import Decimal

import pytest

from sagas.domains.transfers import contracts as t
from sagas.domains.transfers.account import MAX_BALANCE, Account
from sagas.domains.transfers.saga import TransferSaga
from sagas.machinery.step import EVENTS_CHANNEL

from .helpers import T0, Bus, envelope

pytestmark = pytest.mark.unit
SAGA, ACCOUNT = "transfer-saga", "account"


def bank(**balances: str) -> Bus:
    bus = Bus.of(TransferSaga(), Account())
    for account, balance in balances.items():
        bus.send(ACCOUNT, envelope(t.OpenAccount(balance=Decimal(balance)), key=account))
    return bus


def transfer(bus: Bus, tid: str, source: str, destination: str, amount: str) -> None:
    command = t.RequestTransfer(source=source, destination=destination, amount=Decimal(amount))
    bus.send(SAGA, envelope(command, key=tid, saga_id=tid))


def balance(bus: Bus, account: str) -> Decimal:
    return bus.state(ACCOUNT, account).funds.on_hand  # type: ignore[no-any-return]


def outcome(bus: Bus, tid: str) -> tuple[str | None, str | None]:
    state = bus.state(SAGA, tid)
    return state.status, state.reason


def test_a_transfer_moves_the_amount_and_nothing_stays_on_hold() -> None:
    bus = bank(a="100.00", b="5.00")
    transfer(bus, "t-1", "a", "b", "30.50")
    assert outcome(bus, "t-1") == ("COMPLETED", None)
    assert (balance(bus, "a"), balance(bus, "b")) == (Decimal("69.50"), Decimal("35.50"))
    assert bus.state(ACCOUNT, "a").funds.held == 0
    statuses = [e.message().status for e in bus.published if e.type == "transfer.StatusChanged"]
    assert statuses == ["COMMITTING", "COMPLETED"]


@pytest.mark.parametrize(
    ("source", "destination", "amount", "reason"),
    [
        ("a", "b", "100.01", "insufficient funds: 100.00 available"),
        ("a", "closed", "1.00", "account closed"),
        ("a", "nobody", "1.00", "no such account"),
        ("nobody", "b", "1.00", "no such account"),
    ],
)
def test_a_refused_hold_fails_the_transfer_and_releases_the_other(
    source: str, destination: str, amount: str, reason: str
) -> None:
    bus = bank(a="100.00", b="0.00", closed="0.00")
    bus.send(ACCOUNT, envelope(t.CloseAccount(), key="closed"))
    transfer(bus, "t-1", source, destination, amount)
    assert outcome(bus, "t-1") == ("FAILED", reason)
    assert balance(bus, "a") == Decimal("100.00")
    assert bus.state(ACCOUNT, "a").funds.held == 0
    assert ("account", "nobody") not in bus.records  # a stray key stores nothing


def test_a_timeout_before_the_commit_releases_both_holds() -> None:
    bus = bank(a="10.00", b="0.00")
    bus.paused.add(ACCOUNT)
    transfer(bus, "t-1", "a", "b", "4.00")
    bus.tick(T0 + timedelta(seconds=30))
    assert outcome(bus, "t-1") == ("FAILED", "timeout")
    bus.resume(ACCOUNT)  # the holds arrive after their releases: tombstones refuse them
    assert (balance(bus, "a"), bus.state(ACCOUNT, "a").funds.held) == (Decimal("10.00"), 0)


def test_past_the_commit_a_timeout_asks_again_and_the_transfer_completes() -> None:
    bus = bank(a="10.00", b="0.00")
    bus.hold = lambda out: out.envelope.type == "account.Commit" and out.envelope.key == "b"
    transfer(bus, "t-1", "a", "b", "4.00")
    assert outcome(bus, "t-1")[0] == "COMMITTING"
    bus.hold = None
    bus._held.clear()  # the first commit to b is lost
    bus.tick(T0 + timedelta(seconds=30))
    assert outcome(bus, "t-1") == ("COMPLETED", None)
    assert (balance(bus, "a"), balance(bus, "b")) == (Decimal("6.00"), Decimal("4.00"))


def test_repeated_commands_move_money_once() -> None:
    bus = bank(a="10.00", b="0.00")
    transfer(bus, "t-1", "a", "b", "4.00")
    again = (
        t.Commit(reservation_id="t-1:debit"),
        t.Commit(reservation_id="t-1:credit"),
        t.Release(reservation_id="t-1:debit"),
        t.HoldFunds(reservation_id="t-1:debit", amount=Decimal(4)),
        t.PrepareCredit(reservation_id="t-1:credit", amount=Decimal(4)),
    )
    for command in again:
        for account in ("a", "b"):
            bus.send(ACCOUNT, envelope(command, key=account, saga_id="t-1", reply_to=SAGA))
    assert (balance(bus, "a"), balance(bus, "b")) == (Decimal("6.00"), Decimal("4.00"))
    assert outcome(bus, "t-1") == ("COMPLETED", None)


def test_an_account_cannot_be_opened_twice_or_pass_its_maximum() -> None:
    bus = bank(a="10.00", full=str(MAX_BALANCE))
    bus.send(ACCOUNT, envelope(t.OpenAccount(balance=Decimal("99.00")), key="a"))
    assert balance(bus, "a") == Decimal("10.00")
    transfer(bus, "t-1", "a", "full", "0.01")
    assert outcome(bus, "t-1")[0] == "FAILED"
    assert outcome(bus, "t-1")[1] == f"the balance would pass {MAX_BALANCE}"


@pytest.mark.parametrize("seed", range(6))
def test_random_transfers_conserve_money_and_settle(seed: int) -> None:
    rng = random.Random(seed)
    accounts = {f"acc-{i}": Decimal(rng.randint(0, 50)) for i in range(5)}
    bus = bank(**{k: str(v) for k, v in accounts.items()})
    bus.send(ACCOUNT, envelope(t.CloseAccount(), key="acc-4"))
    # Answers are delayed and reordered at random; some transfers time out.
    bus.hold = lambda out: rng.random() < 0.3
    now = T0
    for i in range(120):
        source, destination = rng.sample([*accounts, "ghost"], 2)
        transfer(
            bus, f"t-{i}", source, destination, f"{rng.randint(1, 30)}.{rng.randint(0, 99):02d}"
        )
        if rng.random() < 0.2:
            now += timedelta(seconds=rng.choice([5, 31]))
            bus.tick(now)
        if rng.random() < 0.5:
            held, bus._held = bus._held, []
            rng.shuffle(held)
            bus._queue.extend(held)
            bus.run(now)
    bus.hold = None
    for _ in range(5):
        bus.resume(ACCOUNT, now)
        now += timedelta(seconds=31)
        bus.tick(now)
    assert sum(balance(bus, a) for a in accounts) == sum(accounts.values())
    assert all(bus.state(ACCOUNT, a).funds.held == 0 for a in accounts)
    assert all(bus.state(ACCOUNT, a).incoming == {} for a in accounts)
    transfers = [s for (ch, _), r in bus.records.items() if ch == SAGA for s in [r.state]]
    assert {s.status for s in transfers} <= {"COMPLETED", "FAILED"}
    moved = {a: Decimal(0) for a in accounts}
    for s in transfers:
        if s.status == "COMPLETED":
            moved[s.debit.key] -= s.amount
            moved[s.credit.key] += s.amount
    assert {a: balance(bus, a) - accounts[a] for a in accounts} == moved
    assert not [
        e for e in bus.published if e.type == "account.Committed" and e.key == EVENTS_CHANNEL
    ]
