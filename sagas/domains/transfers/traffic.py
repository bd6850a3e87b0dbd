"""Sample transfers and the rules money keeps (sagas/machinery/traffic.py): the Spark/online
equality test and the fault harness drive these; the invariants read what they left."""

from __future__ import annotations

import random
from collections import defaultdict
from collections.abc import Sequence
from decimal import Decimal

from sagas.domains.transfers import contracts as t
from sagas.machinery.traffic import Send, Traffic
from sagas.messages import Envelope

ACCOUNTS = 6
SAGA, ACCOUNT = "transfer-saga", "account"


def setup(run: str) -> list[Send]:
    """Six accounts (100.00 to 600.00) and a seventh, closed at once."""
    opened = [
        Send(ACCOUNT, f"acc-{i}-{run}", t.OpenAccount(balance=Decimal(100 * (i + 1))))
        for i in range(ACCOUNTS)
    ]
    closed = f"closed-{run}"
    return [*opened, Send(ACCOUNT, closed, t.OpenAccount(balance=Decimal(50))),
            Send(ACCOUNT, closed, t.CloseAccount())]  # fmt: skip


def sagas(run: str, rng: random.Random, n: int) -> list[Send]:
    """Transfers between the accounts; about one in ten to the closed account or to one that
    does not exist, and amounts that the source often cannot cover."""
    accounts = [f"acc-{i}-{run}" for i in range(ACCOUNTS)]
    sent = []
    for i in range(n):
        source, destination = rng.sample(accounts, 2)
        if rng.random() < 0.1:
            destination = rng.choice([f"closed-{run}", f"ghost-{run}"])
        amount = Decimal(rng.randint(1, 25000)) / 100
        request = t.RequestTransfer(source=source, destination=destination, amount=amount)
        sent.append(Send(SAGA, f"tr-{i}-{run}", request, saga=True))
    return sent


def invariants(events: Sequence[Envelope]) -> list[str]:
    """Money is neither made nor lost; nothing stays on hold; every transfer ended."""
    opened: dict[str, Decimal] = {}
    moved: dict[str, Decimal] = defaultdict(Decimal)
    last: dict[str, Envelope] = {}
    for event in events:
        last[event.key] = event
        message = event.message()
        if isinstance(message, t.AccountOpened):
            opened[event.key] = message.balance
        elif isinstance(message, t.Committed):
            moved[event.key] += message.amount
    broken = []
    for key, event in last.items():
        fact = event.message()
        if isinstance(fact, t.AccountFact):
            if fact.balance != opened.get(key, Decimal(0)) + moved[key]:
                broken.append(f"{key}: balance {fact.balance}, but it opened with "
                              f"{opened.get(key)} and its commits add {moved[key]}")  # fmt: skip
            if fact.on_hold:
                broken.append(f"{key} still holds {fact.on_hold} with every transfer ended")
        elif isinstance(fact, t.TransferRequested | t.TransferStatusChanged):
            status = fact.status if isinstance(fact, t.TransferStatusChanged) else "PENDING"
            if status not in t.FINAL_STATUSES:
                broken.append(f"{key} is {status}, not final")
    total = sum(opened.values(), Decimal(0))
    held = sum((f.balance for e in last.values() if isinstance(f := e.message(), t.AccountFact)),
               Decimal(0))  # fmt: skip
    if held != total:
        broken.append(f"the accounts hold {held} in all; {total} was opened")
    return broken


TRAFFIC = Traffic(setup=setup, sagas=sagas, invariants=invariants)
