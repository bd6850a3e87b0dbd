"""A worker the group no longer knows writes nothing, though its loop never froze; and a
batch refused while partitions change hands is left to the assignment that follows.

The fault harness (RELIABILITY.md, defect 6; run 035902ab09, cycle 2) found a worker whose
session expired while the broker was down: once the broker was back, the heartbeat said
"member_id was not recognized", the group had given its partitions to another worker, and a
batch already taken from the stream was decided and written while Faust revoked, after the
new owner had recovered those partitions: index entries the new owner's store never read.
"""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest
from faust.types import TP

from services.worker import agents
from services.worker import membership as membership_module
from services.worker.agents import handle_until_done
from services.worker.faust_seam import group_member
from services.worker.membership import Membership, MembershipInDoubt
from services.worker.metrics import Metrics
from services.worker.runner import Incoming
from tests.unit.helpers import Clock

pytestmark = pytest.mark.unit


class Group:
    """Whether the coordinator knows this member (aiokafka's member id, reset or not)."""

    def __init__(self) -> None:
        self.member = True

    def __call__(self) -> bool:
        return self.member


def guarded() -> tuple[Membership, Clock, Group]:
    clock, group = Clock(), Group()
    membership = Membership(6.0, lambda: True, clock, member=group)
    membership.tick()
    return membership, clock, group


def test_a_member_the_group_forgot_writes_nothing_until_an_assignment_completes() -> None:
    membership, clock, group = guarded()
    membership.check()
    group.member = False  # the heartbeat after the broker's return: member id not recognized
    clock.now += 0.1  # no freeze: the loop kept turning
    with pytest.raises(MembershipInDoubt, match=r"no longer a member of its group"):
        membership.check()
    group.member = True  # rejoined with a new member id; its assignment not complete yet
    for _ in range(200):  # 50 s of a turning loop change nothing
        clock.now += 0.25
        membership.tick()
        with pytest.raises(MembershipInDoubt):
            membership.check()
    membership.assigned()
    membership.check()
    assert not membership.in_doubt


def test_the_ticker_notes_an_expulsion_no_write_saw() -> None:
    membership, clock, group = guarded()
    group.member = False
    clock.now += 0.25
    membership.tick()
    group.member = True  # a new member id before the next write asked
    with pytest.raises(MembershipInDoubt):
        membership.check()


def test_expelled_after_a_write_was_acknowledged_the_process_exits_without_storing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    exits: list[int] = []
    monkeypatch.setattr("services.worker.membership.os._exit", exits.append)
    membership, _, group = guarded()
    membership.confirm_after_write()
    group.member = False
    membership.confirm_after_write()
    assert exits == [membership_module.EXIT_IN_DOUBT]


def _app_with_member_id(member_id: str | None) -> Any:
    coordinator = None if member_id is None else SimpleNamespace(member_id=member_id)
    consumer = None if coordinator is None else SimpleNamespace(_coordinator=coordinator)
    return SimpleNamespace(consumer=SimpleNamespace(_thread=SimpleNamespace(_consumer=consumer)))


def test_group_membership_is_read_from_aiokafka_s_member_id() -> None:
    assert group_member(_app_with_member_id("faust-0.15.3-947006c6"))
    assert not group_member(_app_with_member_id(""))  # reset: unknown member, left, not joined
    assert not group_member(_app_with_member_id(None))  # the consumer is not started yet


class Refused:
    """A runner whose every batch is refused (its worker in doubt)."""

    def __init__(self) -> None:
        self.metrics = Metrics()
        self.attempts = 0
        self.name = "order-saga"
        self.input_topics = ("orders",)
        self.table: Any = None
        self.positions: Any = None

    async def handle_batch(self, batch: Any) -> None:
        self.attempts += 1
        raise MembershipInDoubt("in doubt")


def _app(rebalancing: bool) -> Any:
    owned = {TP("orders", 0)}
    return SimpleNamespace(
        rebalancing=rebalancing,
        in_recovery=False,
        consumer=SimpleNamespace(assignment=lambda: owned),
    )


BATCH = [Incoming(topic="orders", partition=0, offset=7, key=b"k", value=b"{}")]


async def test_a_batch_refused_during_a_rebalance_is_left_to_the_assignment_that_follows(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Faust's revocation waits for this batch's events: retrying it until the doubt ends
    (which only that assignment ends) held the whole worker out of its group for good
    (worker1 of run 035902ab09, cycle 2: "wait_empty: Waiting for tasks" until stopped)."""
    monkeypatch.setattr(agents, "RETRY_FIRST_S", 0.001)
    runner = Refused()
    await asyncio.wait_for(handle_until_done(_app(rebalancing=True), runner, list(BATCH)), 1.0)
    assert runner.attempts == 1


async def test_a_batch_refused_outside_a_rebalance_is_retried(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(agents, "RETRY_FIRST_S", 0.001)
    monkeypatch.setattr(agents, "RETRY_MAX_S", 0.001)
    runner = Refused()
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(handle_until_done(_app(rebalancing=False), runner, list(BATCH)), 0.2)
    assert runner.attempts > 1
