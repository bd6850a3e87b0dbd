"""The worker's stall check: a partition with records waiting that does not move is reported
once, after the threshold and after the broker confirmed a record waits, and once when it
moves again; nothing else is."""

from types import SimpleNamespace

import pytest
from faust.types import TP

from services.worker.stalls import Stall, StallWatch, Watched, check_stalls, describe

pytestmark = pytest.mark.unit

P = ("orders.order-saga", 3)


def test_a_partition_behind_and_unmoved_is_a_candidate_after_the_threshold() -> None:
    watch = StallWatch(after_s=60)
    assert watch.observe(0, {P: (100, 120)}) == ([], [])
    assert watch.observe(59.9, {P: (100, 120)}) == ([], [])
    candidates, moving = watch.observe(60, {P: (100, 130)})
    assert candidates == [Stall(P[0], P[1], 100, 130, 60)] and moving == []
    watch.confirm(candidates[0])
    assert watch.stalled == 1
    assert watch.observe(600, {P: (100, 400)}) == ([], [])  # said once, not every turn
    assert watch.stalled == 1


def test_moving_again_after_a_stall_is_reported_and_the_clock_restarts() -> None:
    watch = StallWatch(after_s=10)
    watch.observe(0, {P: (5, 9)})
    (stall,), _ = watch.observe(10, {P: (5, 9)})
    watch.confirm(stall)
    assert watch.observe(11, {P: (6, 9)}) == ([], [P])
    assert watch.stalled == 0
    assert watch.observe(20, {P: (6, 9)}) == ([], [])
    assert len(watch.observe(21, {P: (6, 9)})[0]) == 1


def test_nothing_waiting_by_the_brokers_word_is_not_asked_again_until_the_end_moves() -> None:
    watch = StallWatch(after_s=10)
    watch.observe(0, {P: (5, 6)})  # offset 5: a transaction's commit marker, say
    (stall,), _ = watch.observe(10, {P: (5, 6)})
    watch.nothing_waits(stall)
    assert watch.observe(100, {P: (5, 6)}) == ([], [])
    assert watch.stalled == 0
    (again,), _ = watch.observe(101, {P: (5, 8)})  # records came and it did not move
    assert again.end == 8


def test_a_partition_that_moves_or_has_nothing_waiting_never_stalls() -> None:
    watch = StallWatch(after_s=10)
    for t in range(0, 100, 5):
        owned = {P: (t, t + 50), ("t", 0): (7, 7), ("t", 1): (None, None), ("t", 2): (None, 0)}
        assert watch.observe(t, owned) == ([], [])


def test_a_partition_handed_away_or_a_rebalance_forgets_its_clock() -> None:
    watch = StallWatch(after_s=10)
    watch.observe(0, {P: (1, 2)})
    watch.observe(5, {})  # handed to another worker
    assert watch.observe(12, {P: (1, 2)}) == ([], [])  # back: timed from now
    watch.forget()
    assert watch.observe(21, {P: (1, 2)}) == ([], [])
    assert len(watch.observe(31, {P: (1, 2)})[0]) == 1


class _App:
    def __init__(self, ends: dict[TP, int]) -> None:
        self.rebalancing = False
        self.in_recovery = False
        self.now = 0.0
        self.loop = SimpleNamespace(time=lambda: self.now)
        self.consumer = SimpleNamespace(
            assignment=lambda: {*ends, TP("changelog", 0)}, highwater=ends.__getitem__
        )


async def test_the_check_asks_the_broker_before_it_calls_a_partition_stalled(
    caplog: pytest.LogCaptureFixture,
) -> None:
    app = _App({TP("in", 0): 9, TP("in", 1): 4, TP("in", 2): 6})
    at = {("in", 0): 5, ("in", 1): 4, ("in", 2): 5}
    asked: list[tuple[str, int, int]] = []

    async def first_offset(topic: str, partition: int, offset: int) -> int | None:
        asked.append((topic, partition, offset))
        return 7 if partition == 0 else None  # in[2]: offset 5 is a commit marker

    watched = {"in": Watched(lambda t, p: at[(t, p)], first_offset)}
    counts: list[int] = []
    watch = StallWatch(after_s=10)
    await check_stalls(app, watched, watch, counts.append)
    app.now = 10
    with caplog.at_level("INFO", logger="services.worker.stalls"):
        await check_stalls(app, watched, watch, counts.append)
        app.now = 20
        await check_stalls(app, watched, watch, counts.append)  # neither asked again
    assert sorted(asked) == [("in", 0, 5), ("in", 2, 5)]
    assert counts == [0, 1, 1]
    assert [r.getMessage() for r in caplog.records if r.name == "services.worker.stalls"] == [
        "stalled: in[0]: a record waits at offset 7 (end offset 9) and nothing was processed "
        "from offset 5 for 10 s; the partition's records are not being processed"
    ]
    at[("in", 0)] = 9
    with caplog.at_level("INFO", logger="services.worker.stalls"):
        await check_stalls(app, watched, watch, counts.append)
    assert caplog.records[-1].getMessage() == "in[0]: moving again after a stall"
    assert counts[-1] == 0
    app.rebalancing = True
    at[("in", 0)] = 9
    await check_stalls(app, watched, watch, counts.append)
    assert counts[-1] == 0


def test_a_stall_says_where_it_stands_in_a_sentence() -> None:
    stall = Stall("in", 1, None, 4, 61.2)
    assert describe(stall, 2) == (
        "in[1]: a record waits at offset 2 (end offset 4) and nothing was processed from its "
        "first record for 61 s; the partition's records are not being processed"
    )


async def test_a_broker_that_does_not_answer_leaves_the_partition_to_the_next_turn() -> None:
    app = _App({TP("in", 0): 9})
    answers: list[int | Exception] = [ConnectionError("broker away"), 7]

    async def first_offset(topic: str, partition: int, offset: int) -> int | None:
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    watched = {"in": Watched(lambda t, p: 5, first_offset)}
    counts: list[int] = []
    watch = StallWatch(after_s=10)
    for app.now in (0, 10, 11):
        await check_stalls(app, watched, watch, counts.append)
    assert counts == [0, 0, 1] and answers == []


def test_a_partition_started_at_the_committed_offset_is_judged_once_it_has_a_position() -> None:
    """With SAGALINE_START_WITHOUT_POSITION=committed the records below the group's offset
    are never processed: a partition with no position is not judged from offset 0."""
    watch = StallWatch(after_s=10, judge_unstarted=False)
    for t in (0, 10, 20):
        assert watch.observe(t, {P: (None, 40)}) == ([], [])
    watch.observe(21, {P: (40, 45)})
    assert len(watch.observe(31, {P: (40, 45)})[0]) == 1
