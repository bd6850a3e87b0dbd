"""The soak's per-partition fault timings (benchmarks.soak_faults): what each figure counts."""

from __future__ import annotations

import pytest

from benchmarks import soak_state
from benchmarks.soak_faults import Event, describe


def test_resumed_counts_any_order_written_after_the_fault() -> None:
    # Partition 1 belonged to the dead worker: its first outcome after the kill (at wall
    # 1000) was written at 1012, for an order sent before the kill (queued behind it); the
    # one written before the kill does not count.
    written = [(999.5, 1), (1000.25, 0), (1013.0, 1), (1012.0, 1)]
    assert soak_state.resumed_after(written, 1000.0) == {0: 0.25, 1: 12.0}


def test_describe_gives_both_figures_and_the_partitions_without_any() -> None:
    event = Event("sigkill", 20, at=50.0, wall=1000.0)
    # (sent, ended, status, partition) in loop time: partition 1's first order sent after
    # the kill ends 25 s after it (behind the queue); its first outcome at all is written
    # 12 s after it. Partition 2 has none.
    done = [
        (49.0, 62.0, "CONFIRMED", 1),
        (51.0, 75.0, "CONFIRMED", 1),
        (50.5, 50.9, "CONFIRMED", 0),
    ]
    written = [(1012.0, 1), (1025.0, 1), (1000.5, 0)]
    line = describe(event, done, written, partitions=3)
    assert line.startswith(
        "sigkill at minute 20: every partition processing again 25.0 s after it "
        "(p0=0.9 p1=25.0), no order ended since on [2]; "
    )
    assert (
        "resumed (its first outcome written after it, of any order) 12.0 s after it "
        "(p0=0.5 p1=12.0), no order ended since on [2]"
    ) in line
    assert soak_state.back_after(done, event.at) == {0: pytest.approx(0.9), 1: 25.0}
