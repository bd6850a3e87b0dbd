"""Money transfers end to end on the real broker: REST -> Kafka -> the transfer saga and the
accounts (one worker process) -> domain events -> projector -> PostgreSQL -> the GET routes."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from decimal import Decimal
from typing import Any

import pytest
import pytest_asyncio

from tests.integration.harness import Stack, isolated_settings, running_stack
from tests.integration.readside import fresh_database

pytestmark = [pytest.mark.integration, pytest.mark.asyncio(loop_scope="module")]


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def stack(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Stack]:
    tmp = tmp_path_factory.mktemp("transfers")
    with fresh_database("postgresql", tmp) as url:
        settings = isolated_settings(tmp, database_url=url)
        async with running_stack(settings, tmp, projected=True) as stack:
            yield stack


async def _open(stack: Stack, account: str, balance: str) -> None:
    response = await stack.http.put(f"/accounts/{account}", json={"balance": balance})
    assert response.status_code == 202, response.text
    row = await stack.read(f"/accounts/{account}", response.json()["consistency_token"])
    assert (row["balance"], row["status"]) == (balance, "open")


async def _transfer(stack: Stack, source: str, destination: str, amount: str) -> dict[str, Any]:
    body = {"source": source, "destination": destination, "amount": amount}
    response = await stack.http.post("/transfers", json=body)
    assert response.status_code == 202, response.text
    accepted = response.json()
    params = {"consistency_token": accepted["consistency_token"], "wait": 30}
    answer = await stack.http.get(f"/transfers/{accepted['transfer_id']}", params=params)
    assert answer.status_code == 200, answer.text
    row: dict[str, Any] = answer.json()
    return row


async def test_transfers_move_money_and_refusals_release_what_was_held(stack: Stack) -> None:
    await asyncio.gather(_open(stack, "ann", "100.00"), _open(stack, "bo", "10.00"))
    done = await _transfer(stack, "ann", "bo", "60.00")
    short = await _transfer(stack, "bo", "ann", "70.01")
    nowhere = await _transfer(stack, "ann", "nobody", "1.00")
    assert (done["status"], done["reason"]) == ("COMPLETED", None)
    assert (short["status"], short["reason"]) == ("FAILED", "insufficient funds: 70.00 available")
    assert (nowhere["status"], nowhere["reason"]) == ("FAILED", "no such account")
    rows = [
        await stack.eventually(f"/accounts/{a}", lambda r: r["on_hold"] == "0.00")
        for a in ("ann", "bo")
    ]
    assert [(r["balance"], r["on_hold"]) for r in rows] == [("40.00", "0.00"), ("70.00", "0.00")]
    assert sum(Decimal(r["balance"]) for r in rows) == Decimal("110.00")
