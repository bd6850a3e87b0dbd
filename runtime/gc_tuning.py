"""Python's cyclic garbage collector, set for processes that allocate many short-lived objects.

Why: at full load the saga worker spent a quarter to a third of its wall time in the collector
(BENCHMARKS.md, "Issue 11, fifth step"; a py-spy profile shows it as self time of whatever
allocated last, mostly pydantic's ``BaseModel.__init__``). Python collects its youngest
generation every 700 net allocations of container objects, about 120 times a second there,
and every tenth of those the middle one; now and then a full collection walks every object
the process holds (~350,000: Faust, aiokafka, the decoded-state cache, the seen windows),
100 ms or more each. Almost all a batch allocates (envelopes, states, dicts) is freed by
reference counting the moment it is dropped; the collector is only needed for reference
cycles, and those are few. With a first threshold of 50,000 it runs a few times a minute at
full load and still frees every cycle.

``gc.freeze()`` after start-up moves what import and start-up built (modules, classes,
pydantic's validators, most of Faust) into a generation no collection walks again: a full
collection, like the ones Faust runs at every rebalance, then walks only what came after.

:data:`CLOCK` counts collections and the time spent in them, by generation;
:class:`GcCollector` serves them on each component's Prometheus endpoint.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

GENERATIONS = (0, 1, 2)


@dataclass
class GcClock:
    """Collections run and seconds spent in them, by generation (via ``gc.callbacks``)."""

    collections: list[int] = field(default_factory=lambda: [0, 0, 0])
    seconds: list[float] = field(default_factory=lambda: [0.0, 0.0, 0.0])
    _started: float = 0.0

    def callback(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
            return
        generation = info["generation"]
        self.collections[generation] += 1
        self.seconds[generation] += time.perf_counter() - self._started

    def install(self) -> None:
        """Start counting (once per process, however often it is called)."""
        if self.callback not in gc.callbacks:
            gc.callbacks.append(self.callback)

    def snapshot(self) -> dict[str, float]:
        return {
            "gc.collections": sum(self.collections),
            "gc.seconds": round(sum(self.seconds), 3),
            **{f"gc.gen{g}_collections": self.collections[g] for g in GENERATIONS},
            **{f"gc.gen{g}_seconds": round(self.seconds[g], 3) for g in GENERATIONS},
        }


CLOCK = GcClock()


def tune(threshold: int, freeze: bool) -> None:
    """Set the youngest generation's threshold (0 keeps Python's), freeze what exists now if
    asked, and start :data:`CLOCK`. Call it once start-up has built what lives for good."""
    if threshold > 0:
        _, middle, oldest = gc.get_threshold()
        gc.set_threshold(threshold, middle, oldest)
    if freeze:
        gc.freeze()
    CLOCK.install()


class GcCollector(Collector):
    """:data:`CLOCK` for Prometheus: collections and the seconds spent in them, by
    generation (a rising share of seconds is CPU the component's own work does not get), and
    the settings in effect: the youngest generation's threshold and the frozen objects."""

    def collect(self) -> Iterator[CounterMetricFamily | GaugeMetricFamily]:
        runs = CounterMetricFamily(
            "sagaline_gc_collections",
            "Python garbage-collector runs in this process, by generation",
            labels=["generation"],
        )
        seconds = CounterMetricFamily(
            "sagaline_gc_seconds",
            "Seconds this process spent in Python's garbage collector, by generation",
            labels=["generation"],
        )
        for g in GENERATIONS:
            runs.add_metric([str(g)], CLOCK.collections[g])
            seconds.add_metric([str(g)], CLOCK.seconds[g])
        yield runs
        yield seconds
        yield GaugeMetricFamily(
            "sagaline_gc_threshold",
            "Net allocations between two collections of the youngest generation",
            value=gc.get_threshold()[0],
        )
        yield GaugeMetricFamily(
            "sagaline_gc_frozen_objects",
            "Objects start-up left in the generation no collection walks (gc.freeze)",
            value=gc.get_freeze_count(),
        )
