"""A worker thawed after a freeze longer than half its session timeout writes nothing until
the group has confirmed it (services/worker/membership.py): the fault harness with three
workers found a thawed worker writing beside the partitions' new owner."""

from __future__ import annotations

import pytest

from services.worker import membership as membership_module
from services.worker.membership import Membership, MembershipInDoubt
from tests.unit.helpers import Clock

pytestmark = pytest.mark.unit


def ticking(session_timeout_s: float = 10.0, rebalancing: bool = False) -> tuple[Membership, Clock]:
    clock = Clock()
    membership = Membership(session_timeout_s, lambda: rebalancing, clock)
    membership.tick()
    return membership, clock


def test_a_process_whose_ticker_turns_writes() -> None:
    membership, clock = ticking()
    for _ in range(100):
        clock.now += 0.25
        membership.tick()
        membership.check()
    assert not membership.in_doubt and membership.refused == 0


def test_a_freeze_seen_by_the_write_itself_refuses_it_with_a_sentence() -> None:
    membership, clock = ticking()
    clock.now += 5.5  # frozen mid-batch: the ticker has not turned since
    with pytest.raises(MembershipInDoubt, match=r"frozen for more than 5 s .* writes nothing"):
        membership.check()
    assert membership.refused == 1


def test_a_freeze_seen_by_the_ticker_refuses_the_next_write() -> None:
    membership, clock = ticking()
    clock.now += 7.0
    membership.tick()  # the ticker ran first after the thaw
    with pytest.raises(MembershipInDoubt):
        membership.check()


def test_a_freeze_shorter_than_half_the_session_is_not_a_doubt() -> None:
    membership, clock = ticking()
    clock.now += 4.9
    membership.check()
    assert not membership.in_doubt


def test_a_completed_assignment_ends_the_doubt() -> None:
    membership, clock = ticking()
    clock.now += 12.0
    membership.tick()
    membership.assigned()
    membership.check()


def test_a_session_without_a_rebalance_ends_the_doubt_but_a_rebalance_holds_it() -> None:
    kept, clock = ticking(rebalancing=False)
    clock.now += 6.0
    kept.tick()
    for _ in range(40):  # 10 s of refusals, the ticker turning
        clock.now += 0.25
        kept.tick()
        with pytest.raises(MembershipInDoubt):
            kept.check()
    clock.now += 0.25
    kept.check()  # more than a session timeout after the freeze, still a member

    expelled, clock = ticking(rebalancing=True)
    clock.now += 6.0
    expelled.tick()
    clock.now += 60.0
    expelled.tick()
    with pytest.raises(MembershipInDoubt):
        expelled.check()  # the rebalance it caused is still going: only its end ends it


def test_in_doubt_after_a_write_was_acknowledged_the_process_exits_without_storing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Storing the write could skip a new owner's records; leaving it unstored and going
    on would let the next write's persisted offset skip it: a restart recovers both."""
    exits: list[int] = []
    monkeypatch.setattr("services.worker.membership.os._exit", exits.append)
    membership, clock = ticking()
    membership.confirm_after_write()
    assert exits == []
    clock.now += 8.0
    membership.confirm_after_write()
    assert exits == [membership_module.EXIT_IN_DOUBT]
