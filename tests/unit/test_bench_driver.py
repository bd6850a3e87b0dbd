"""The benchmark driver's hygiene: its collector off in a measured phase, its stalls seen, its
cleanup limited to its own topics.

The driver stamps every order it measures; a pause of the driver is in every latency it
reports (BENCHMARKS.md, "Issue 11, sixth step")."""

from __future__ import annotations

import asyncio
import gc
import time

import pytest

from benchmarks.common import StallWatch, delete_run_topics, driver_collector_paused
from runtime.settings import Settings

pytestmark = pytest.mark.unit


def test_the_collector_is_off_in_a_phase_and_as_before_after_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("BENCH_DRIVER_GC", raising=False)
    assert gc.isenabled()
    with driver_collector_paused():
        assert not gc.isenabled()
    assert gc.isenabled()
    gc.disable()
    try:
        with driver_collector_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()  # it was off before: it stays off
    finally:
        gc.enable()


def test_it_is_restored_when_the_phase_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("BENCH_DRIVER_GC", raising=False)
    with pytest.raises(RuntimeError), driver_collector_paused():
        raise RuntimeError("phase failed")
    assert gc.isenabled()


def test_bench_driver_gc_python_leaves_the_collector_alone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("BENCH_DRIVER_GC", "python")
    with driver_collector_paused():
        assert gc.isenabled()


async def test_the_watch_sees_a_blocked_loop_and_forgets_it_on_reset() -> None:
    watch = StallWatch()
    watch.start()
    try:
        await asyncio.sleep(0.05)
        time.sleep(0.3)  # the driver's loop blocked, as a full collection blocks it
        await asyncio.sleep(0.03)
        assert watch.longest_s >= 0.28
        # The stall is the sleep less the part of the watch's period it overlapped.
        assert f"longest stall {1000 * watch.longest_s:.0f} ms" in watch.summary()
        watch.reset()
        await asyncio.sleep(0.05)
        assert watch.longest_s < 0.25  # the blocked loop is forgotten
    finally:
        await watch.stop()


async def test_a_run_s_cleanup_refuses_a_deployment_s_topics() -> None:
    """A benchmark deletes every topic under its prefix and app id: with the defaults that
    would be a real deployment's, so it refuses before it connects anywhere."""
    with pytest.raises(ValueError, match="refusing to delete"):
        await delete_run_topics(Settings(kafka_bootstrap="127.0.0.1:1"))
    with pytest.raises(ValueError, match="refusing to delete"):
        await delete_run_topics(Settings(topic_prefix="bench1", kafka_bootstrap="127.0.0.1:1"))


def test_the_timeline_shows_latency_and_the_store_share_growing_within_a_step() -> None:
    from collections import Counter

    from benchmarks.bench_curve import timeline

    sent = [100.0 + i / 10 for i in range(100)]  # 10 s of orders at 10/s
    latencies = [0.040 if at < 105 else 0.200 for at in sent]
    samples = [
        (
            100.0 + t,
            0.8 * t,
            Counter(
                {
                    "inventory.store_s": 0.1 * t if t <= 5 else 0.5 + 0.5 * (t - 5),
                    "gc.seconds": 0.0 if t < 7 else 0.3,
                }
            ),
        )
        for t in range(11)
    ]
    rows = timeline(sent, latencies, samples, every=5)
    assert len(rows) == 2
    assert "p50  40.0 ms" in rows[0] and "inventory 10%" in rows[0] and "cpu  80%" in rows[0]
    assert "p99 200.0 ms" in rows[1] and "inventory 50%" in rows[1]
    assert "collector    0 ms" in rows[0] and "collector  300 ms" in rows[1]
    assert timeline(sent, latencies, samples[:1], every=5) == []  # nothing to difference
