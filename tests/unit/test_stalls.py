"""The worker's stall check: a partition with records waiting that does not move is reported
once, after the threshold, and once when it moves again; nothing else is."""

from types import SimpleNamespace

import pytest
from faust.types import TP

from services.worker.stalls import Stall, StallWatch, check_stalls, describe

pytestmark = pytest.mark.unit

P = ("orders.order-saga", 3)


def test_a_partition_behind_and_unmoved_is_reported_once_after_the_threshold() -> None:
    watch = StallWatch(after_s=60)
    assert watch.observe(0, {P: (100, 120)}) == ([], [])
    assert watch.observe(59.9, {P: (100, 125)}) == ([], [])
    begun, moving = watch.observe(60, {P: (100, 130)})
    assert begun == [Stall(P[0], P[1], 100, 130, 60)] and moving == []
    assert watch.stalled == 1
    assert watch.observe(600, {P: (100, 400)}) == ([], [])  # said once, not every minute
    assert watch.stalled == 1


def test_moving_again_after_a_stall_is_reported_and_the_clock_restarts() -> None:
    watch = StallWatch(after_s=10)
    watch.observe(0, {P: (5, 9)})
    assert watch.observe(10, {P: (5, 9)})[0]
    assert watch.observe(11, {P: (6, 9)}) == ([], [P])
    assert watch.stalled == 0
    assert watch.observe(20, {P: (6, 9)}) == ([], [])
    assert len(watch.observe(21, {P: (6, 9)})[0]) == 1


def test_a_partition_that_moves_or_has_nothing_waiting_never_stalls() -> None:
    watch = StallWatch(after_s=10)
    for t in range(0, 100, 5):
        busy = watch.observe(t, {P: (t, t + 50), ("t", 0): (7, 7), ("t", 1): (None, None)})
        assert busy == ([], [])


def test_a_partition_never_processed_with_records_waiting_stalls() -> None:
    watch = StallWatch(after_s=10)
    watch.observe(0, {P: (None, 4)})
    (stall,), _ = watch.observe(10, {P: (None, 4)})
    assert stall.position is None
    assert "4 offset(s) waiting" in describe(stall) and "its first record" in describe(stall)


def test_a_partition_handed_away_or_a_rebalance_forgets_its_clock() -> None:
    watch = StallWatch(after_s=10)
    watch.observe(0, {P: (1, 2)})
    watch.observe(5, {})  # handed to another worker
    assert watch.observe(12, {P: (1, 2)}) == ([], [])  # back: timed from now
    watch.forget()
    assert watch.observe(21, {P: (1, 2)}) == ([], [])
    assert len(watch.observe(31, {P: (1, 2)})[0]) == 1


class _Positions:
    def __init__(self, at: dict[tuple[str, int], int | None]) -> None:
        self.at = at

    def next_offset(self, topic: str, partition: int) -> int | None:
        return self.at.get((topic, partition))


def test_the_check_reads_owned_input_partitions_and_skips_a_rebalance(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = [0.0]
    ends = {TP("in", 0): 9, TP("in", 1): 4}

    def highwater(tp: TP) -> int:
        if tp not in ends:
            raise AssertionError(f"{tp} is not assigned")
        return ends[tp]

    app = SimpleNamespace(
        rebalancing=False,
        in_recovery=False,
        consumer=SimpleNamespace(
            assignment=lambda: {TP("in", 0), TP("in", 1), TP("changelog", 0)},
            highwater=highwater,
        ),
        loop=SimpleNamespace(time=lambda: clock[0]),
    )
    runner = SimpleNamespace(positions=_Positions({("in", 0): 5, ("in", 1): 4}))
    counts: list[int] = []
    watch = StallWatch(after_s=10)
    check_stalls(app, {"in": runner}, watch, counts.append)  # type: ignore[dict-item]
    clock[0] = 10
    with caplog.at_level("INFO", logger="services.worker.stalls"):
        check_stalls(app, {"in": runner}, watch, counts.append)  # type: ignore[dict-item]
    assert counts == [0, 1]
    assert [r.getMessage() for r in caplog.records] == [
        "stalled: in[0]: 4 offset(s) waiting and not moved from offset 5 for 10 s (end 9); "
        "the partition's records are not being processed"
    ]
    app.rebalancing = True
    check_stalls(app, {"in": runner}, watch, counts.append)  # type: ignore[dict-item]
    assert counts[-1] == 0 and watch.stalled == 0
