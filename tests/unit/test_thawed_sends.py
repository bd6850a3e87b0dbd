"""Records queued before a freeze do not go out as the worker thaws.

The fault harness (RELIABILITY.md, defect 8; run 080011767e, cycle 1) SIGSTOPped a worker
right after it queued a batch's changelog write. While it was stopped the group gave its
partition to another worker, which recovered the partition to the changelog's end. At
SIGCONT the producer's sender ran before anything else and sent the write: the changelog
then held entries the new owner's store never read, and its own next write set its
persisted offset past them. Every send is checked as it is queued; the producer now checks
again as it puts a request on the wire.
"""

from __future__ import annotations

from typing import Any

import faust
import pytest
from aiokafka.producer.sender import Sender

from services.worker import membership as membership_module
from services.worker.faust_seam import guard_produce_requests
from services.worker.membership import Membership
from tests.unit.helpers import Clock

pytestmark = pytest.mark.unit


class Refused(Exception):
    pass


async def test_each_produce_request_of_the_apps_producer_is_guarded_before_it_is_sent(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    sent: list[tuple[int, Any]] = []

    async def send_request(self: Sender, node_id: int, batches: Any) -> None:
        sent.append((node_id, batches))

    monkeypatch.setattr(Sender, "_send_produce_req", send_request)
    verdicts = ["go", "refuse"]

    def guard() -> None:
        if verdicts.pop(0) == "refuse":
            raise Refused

    app = faust.App("guarded-sends", broker="kafka://127.0.0.1:1")
    guard_produce_requests(app, guard)
    client = app.producer._new_producer()  # what Faust's producer starts with
    try:
        await client._sender._send_produce_req(1, {"tp": "batch"})
        with pytest.raises(Refused):
            await client._sender._send_produce_req(1, {"tp": "later"})
    finally:
        await client.stop()
    assert sent == [(1, {"tp": "batch"})]  # the refused request never reached the wire


def test_records_queued_before_a_freeze_make_the_process_exit_as_they_would_go_out(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    exits: list[int] = []
    monkeypatch.setattr("services.worker.membership.os._exit", exits.append)
    clock = Clock()
    membership = Membership(10.0, lambda: False, clock)
    membership.tick()
    clock.now += 0.25
    membership.tick()
    membership.confirm_before_transmit()  # the ticker turns: the request goes out
    assert exits == []
    clock.now += 8.0  # SIGSTOP, SIGCONT: the sender runs before the ticker
    membership.confirm_before_transmit()
    assert exits == [membership_module.EXIT_IN_DOUBT]


def test_records_queued_before_an_expulsion_make_the_process_exit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A broker down for longer than the session: the producer retries a batch queued
    before, and the group has given the partitions away meanwhile."""
    exits: list[int] = []
    monkeypatch.setattr("services.worker.membership.os._exit", exits.append)
    clock = Clock()
    known = [True]
    membership = Membership(10.0, lambda: False, clock, member=lambda: known[0])
    membership.tick()
    known[0] = False
    clock.now += 0.25
    membership.confirm_before_transmit()
    assert exits == [membership_module.EXIT_IN_DOUBT]
