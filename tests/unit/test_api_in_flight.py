"""The API's cache of the sagas in flight by type and version (services/api/inflight.py),
over a fake reader: read at most every ``every_s``, in a thread, and a failed reading keeps
the last values and counts the failure. The real reading: tests/integration/test_versions.py."""

from __future__ import annotations

import asyncio
import threading
import time
from collections import Counter
from collections.abc import Sequence

import pytest
from prometheus_client import generate_latest

from services.api.inflight import InFlight
from services.api.metrics import ApiPrometheus
from services.inflight import ChannelVersions
from tests.unit.helpers import Clock

pytestmark = pytest.mark.unit


def orders(v1: int, v2: int) -> ChannelVersions:
    return ChannelVersions("order-saga", 2, (1,), Counter({1: v1, 2: v2}))


class FakeReader:
    """Answers its queue in order (an exception is raised), noting the thread it ran on."""

    def __init__(self, *answers: Sequence[ChannelVersions] | Exception) -> None:
        self.answers = list(answers)
        self.calls = 0
        self.threads: list[threading.Thread] = []

    def __call__(self) -> Sequence[ChannelVersions]:
        self.calls += 1
        self.threads.append(threading.current_thread())
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer


def sample(metrics: ApiPrometheus, name: str, **labels: str) -> float | None:
    return metrics.registry.get_sample_value(name, labels)


async def test_it_reads_in_a_thread_and_again_only_after_the_interval() -> None:
    reader, clock, metrics = (
        FakeReader([orders(3, 1)], [orders(2, 4)]),
        Clock(1000.0),
        ApiPrometheus(),
    )
    cache = InFlight(reader, 60.0, metrics, clock=clock)
    first = await cache.current()
    assert reader.calls == 1 and reader.threads[0] is not threading.current_thread()
    assert first.counts() == [("order-saga", 1, 3), ("order-saga", 2, 1)]
    assert first.read_at is not None and first.failed is None
    assert sample(metrics, "sagaline_sagas_in_flight", saga_type="order-saga", version="1") == 3

    clock.now += 59.0  # not due: the last values, no reading
    assert (await cache.current()).counts() == first.counts()
    assert reader.calls == 1

    clock.now += 1.0
    assert (await cache.current()).counts() == [("order-saga", 1, 2), ("order-saga", 2, 4)]
    assert reader.calls == 2
    assert sample(metrics, "sagaline_sagas_in_flight", saga_type="order-saga", version="2") == 4


async def test_a_failed_reading_keeps_the_last_values_and_is_counted() -> None:
    down = ConnectionError("the broker did not answer")
    reader = FakeReader([orders(2, 1)], down, [orders(0, 5)])
    clock, metrics = Clock(1000.0), ApiPrometheus()
    cache = InFlight(reader, 30.0, metrics, clock=clock)
    await cache.current()
    failures = "sagaline_sagas_in_flight_read_failures_total"
    assert sample(metrics, failures) == 0

    clock.now += 30.0
    kept = await cache.current()
    assert kept.counts() == [("order-saga", 1, 2), ("order-saga", 2, 1)]
    assert kept.failed is not None and "the broker did not answer" in kept.failed
    assert sample(metrics, failures) == 1
    assert sample(metrics, "sagaline_sagas_in_flight", saga_type="order-saga", version="1") == 2

    clock.now += 10.0  # a failed attempt waits its interval too: no reading per scrape
    await cache.current()
    assert reader.calls == 2

    clock.now += 20.0
    back = await cache.current()
    assert back.failed is None and back.counts()[0] == ("order-saga", 1, 0)
    text = generate_latest(metrics.registry).decode()
    assert 'sagaline_sagas_in_flight{saga_type="order-saga",version="1"} 0.0' in text
    assert 'sagaline_sagas_in_flight{saga_type="order-saga",version="2"} 5.0' in text


async def test_a_slow_reading_is_waited_for_a_bounded_time_and_read_once() -> None:
    release = threading.Event()

    def slow() -> Sequence[ChannelVersions]:
        release.wait(5)
        return [orders(1, 1)]

    cache = InFlight(slow, 60.0, ApiPrometheus(), wait_s=0.05, clock=Clock(1000.0))
    waiting = await asyncio.gather(cache.current(), cache.current())
    assert [r.read_at for r in waiting] == [None, None]  # the previous values: none yet
    release.set()
    for _ in range(100):
        if cache.reading.read_at is not None:
            break
        await asyncio.sleep(0.01)
    assert cache.reading.counts() == [("order-saga", 1, 1), ("order-saga", 2, 1)]


async def test_a_version_gone_from_the_reading_leaves_the_gauge() -> None:
    gone = ChannelVersions("order-saga", 2, (), Counter({2: 1}))
    reader, clock, metrics = FakeReader([orders(0, 1)], [gone]), Clock(1000.0), ApiPrometheus()
    cache = InFlight(reader, 1.0, metrics, clock=clock)
    await cache.current()
    clock.now += 1.0
    await cache.current()
    assert sample(metrics, "sagaline_sagas_in_flight", saga_type="order-saga", version="1") is None
    assert sample(metrics, "sagaline_sagas_in_flight", saga_type="order-saga", version="2") == 1


async def test_only_the_request_that_starts_a_reading_waits_for_it() -> None:
    """A broker that drops connections makes a reading hang: one request per interval pays
    the bounded wait, the others answer at once with the last values."""
    release = threading.Event()

    def hanging() -> Sequence[ChannelVersions]:
        release.wait(5)
        return [orders(1, 1)]

    cache = InFlight(hanging, 60.0, ApiPrometheus(), wait_s=0.5, clock=Clock(1000.0))
    first = asyncio.ensure_future(cache.current())
    await asyncio.sleep(0.05)
    started = time.monotonic()
    await cache.current()
    assert time.monotonic() - started < 0.2
    release.set()
    await first
