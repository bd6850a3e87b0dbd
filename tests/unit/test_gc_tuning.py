"""runtime.gc_tuning: the collector's threshold, the freeze, and the clock the metrics read."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from runtime import gc_tuning
from runtime.gc_tuning import CLOCK, GcClock, GcCollector


@pytest.fixture(autouse=True)
def restore_gc() -> Iterator[None]:
    """Every test leaves the interpreter's collector as it found it."""
    threshold = gc.get_threshold()
    callbacks = list(gc.callbacks)
    yield
    gc.set_threshold(*threshold)
    gc.unfreeze()
    gc.callbacks[:] = callbacks


def test_tune_sets_the_youngest_threshold_and_keeps_the_others() -> None:
    gc.set_threshold(700, 11, 12)
    gc_tuning.tune(50_000, freeze=False)
    assert gc.get_threshold() == (50_000, 11, 12)


def test_a_zero_threshold_keeps_pythons() -> None:
    gc.set_threshold(700, 10, 10)
    gc_tuning.tune(0, freeze=False)
    assert gc.get_threshold() == (700, 10, 10)


def test_freeze_moves_what_exists_out_of_the_collectors_reach() -> None:
    gc.unfreeze()
    assert gc.get_freeze_count() == 0
    gc_tuning.tune(0, freeze=True)
    assert gc.get_freeze_count() > 1_000  # this interpreter's modules, classes, functions...


def test_without_freeze_nothing_is_frozen() -> None:
    gc.unfreeze()
    gc_tuning.tune(50_000, freeze=False)
    assert gc.get_freeze_count() == 0


def test_the_clock_counts_each_collection_by_generation_once_however_often_installed() -> None:
    clock = GcClock()
    clock.install()
    clock.install()
    assert gc.callbacks.count(clock.callback) == 1
    gc.collect(0)
    gc.collect(2)
    gc.collect(2)
    assert clock.collections == [1, 0, 2]
    assert clock.seconds[2] > 0
    snapshot = clock.snapshot()
    assert snapshot["gc.collections"] == 3
    assert snapshot["gc.gen2_collections"] == 2
    assert snapshot["gc.seconds"] == round(sum(clock.seconds), 3)
    assert snapshot["gc.gen2_seconds"] == round(clock.seconds[2], 3)


def test_tune_starts_the_process_clock() -> None:
    gc.callbacks[:] = [c for c in gc.callbacks if c != CLOCK.callback]
    before = CLOCK.collections[1]
    gc_tuning.tune(0, freeze=False)
    gc.collect(1)
    assert CLOCK.collections[1] == before + 1


def test_the_collector_serves_the_clock_and_the_settings_in_effect() -> None:
    gc.set_threshold(12_345, 10, 10)
    gc_tuning.tune(0, freeze=True)
    frozen = gc.get_freeze_count()
    gc.collect(2)
    registry = CollectorRegistry()
    registry.register(GcCollector())
    samples = {
        (s.name, s.labels.get("generation")): s.value
        for family in text_string_to_metric_families(generate_latest(registry).decode())
        for s in family.samples
    }
    assert samples[("sagaline_gc_collections_total", "2")] == CLOCK.collections[2] >= 1
    assert samples[("sagaline_gc_seconds_total", "2")] == pytest.approx(CLOCK.seconds[2])
    assert samples[("sagaline_gc_threshold", None)] == 12_345
    # (frozen objects that reference counting frees leave the frozen generation)
    assert frozen >= samples[("sagaline_gc_frozen_objects", None)] > 1_000
