"""The worker's fetch planner decides exactly as aiokafka's own: on every branch (records not
yet taken, a node in flight, no leader, a position to reset, paused, fetchable, a cached
read replica valid or expired), the same requests, resets, backoff, metadata flag and
resume futures."""

import random
import time
from types import SimpleNamespace
from typing import Any

import pytest
from aiokafka.cluster import ClusterMetadata
from aiokafka.consumer.fetcher import Fetcher
from aiokafka.consumer.subscription_state import Assignment
from aiokafka.structs import TopicPartition

from services.worker.fetch_planner import AIOKAFKA_PLAN, plan_actions

pytestmark = pytest.mark.unit


def tp(topic: str, partition: int) -> TopicPartition:
    return TopicPartition(topic, partition)


def fixture(*, taken: bool, in_flight: set[int]) -> tuple[Any, Assignment]:
    """A fetcher and an assignment covering every branch, fresh for each planner (a cached
    read replica that expired is dropped by the planning)."""
    cluster = ClusterMetadata()
    cluster._brokers = {1: object(), 2: object(), 3: object()}
    cluster._partitions = {
        "in": {p: SimpleNamespace(leader=1) for p in range(6)} | {6: SimpleNamespace(leader=-1)},
        "far": {p: SimpleNamespace(leader=3) for p in range(3)},
        "cl": {p: SimpleNamespace(leader=1) for p in range(4)},
    }
    tps = [tp("in", p) for p in range(7)] + [tp("far", p) for p in range(3)]
    tps += [tp("cl", p) for p in range(4)] + [tp("gone", 0)]  # gone: no metadata
    assignment = Assignment(tps)
    for t in tps:
        if t != tp("in", 5):  # in[5] has no position: reset from its leader
            assignment.state_value(t).seek(100 + t.partition)
    for p in range(4):
        assignment.state_value(tp("cl", p)).pause()
    backoffs = {} if taken else {tp("in", 0): 0.05, tp("in", 1): 0.0}
    fetcher = fake_fetcher(
        cluster,
        records={t: SimpleNamespace(calculate_backoff=lambda b=b: b) for t, b in backoffs.items()},
        in_flight=in_flight,
        preferred={
            tp("in", 2): (2, time.monotonic() + 60),  # valid: fetched from node 2
            tp("in", 3): (2, time.monotonic() - 1),  # expired: back to the leader
        },
    )
    return fetcher, assignment


def fake_fetcher(
    cluster: ClusterMetadata,
    records: dict[TopicPartition, Any] | None = None,
    in_flight: set[int] | None = None,
    preferred: dict[TopicPartition, tuple[int, float]] | None = None,
) -> Any:
    """What a planner reads of aiokafka's ``Fetcher``, with aiokafka's read-replica method
    (also benchmarks/bench_fetch_planner.py's)."""
    fetcher = SimpleNamespace(
        _records=records or {},
        _in_flight=set(in_flight or ()),
        _preferred_read_replica=preferred or {},
        _client=SimpleNamespace(cluster=cluster),
        _max_partition_fetch_bytes=1_048_576,
        _fetch_max_wait_ms=500,
        _fetch_min_bytes=1,
        _fetch_max_bytes=52_428_800,
        _isolation_level=0,
        _client_rack=None,
        _fetcher_timeout=0.2,
    )
    fetcher._select_read_replica = lambda t: Fetcher._select_read_replica(fetcher, t)
    return fetcher


def outcome(plan: Any, taken: bool, in_flight: set[int]) -> Any:
    fetcher, assignment = fixture(taken=taken, in_flight=in_flight)
    random.seed(11)
    requests, resets, backoff, invalid, resumes = plan(fetcher, assignment)
    return (
        [(node, vars(request)) for node, request in requests],
        dict(resets),
        backoff,
        invalid,
        [(t.topic, t.partition) for t in _paused_of(assignment, resumes)],
        fetcher._preferred_read_replica.keys(),
    )


def _paused_of(assignment: Assignment, futures: list[Any]) -> list[TopicPartition]:
    by_future = {id(assignment.state_value(t).resume_fut): t for t in assignment.tps}
    return [by_future[id(f)] for f in futures]


@pytest.mark.parametrize("taken", [False, True], ids=["records waiting", "all taken"])
@pytest.mark.parametrize("in_flight", [set(), {3}, {1, 2, 3}], ids=["none", "far", "all"])
async def test_the_plan_is_aiokafkas(taken: bool, in_flight: set[int]) -> None:
    ours = outcome(plan_actions, taken, in_flight)
    theirs = outcome(AIOKAFKA_PLAN, taken, in_flight)
    assert ours == theirs
    assert theirs[3] is True  # in[6] (leader -1) and gone[0] (no metadata) ask for metadata


async def test_every_branch_is_taken_somewhere() -> None:
    requests, resets, backoff, _, resumes, replicas = outcome(plan_actions, True, set())
    assert {node for node, _ in requests} == {2, 3}  # node 1 waits for in[5]'s reset
    assert resets == {1: [tp("in", 5)]}
    assert backoff == 0.2 and len(resumes) == 4
    assert list(replicas) == [tp("in", 2)]  # the expired one dropped
    requests, _, backoff, _, _, _ = outcome(plan_actions, False, set())
    assert backoff == 0.05  # in[0]'s records not yet taken hold node 1 back
