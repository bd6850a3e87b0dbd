"""A dead worker's partitions go to their standbys' workers past Faust's cap; a joining
worker still gets its share (services/worker/orphan_promotion.py), on Faust's own assignor."""

from __future__ import annotations

import signal
from typing import Any

import pytest
from faust.assignor.client_assignment import CopartitionedAssignment
from faust.assignor.copartitioned_assignor import CopartitionedAssignor
from hypothesis import given, settings
from hypothesis import strategies as st

from services.worker.orphan_promotion import FAUST_ASSIGNOR, promote_orphans_past_capacity

pytestmark = pytest.mark.unit


def assign(clients: dict[str, tuple[set[int], set[int]]]) -> dict[str, tuple[set[int], set[int]]]:
    cluster = {
        name: CopartitionedAssignment(set(actives), set(standbys), {"t"})
        for name, (actives, standbys) in clients.items()
    }
    done = CopartitionedAssignor({"t"}, cluster, num_partitions=8, replicas=1).get_assignment()
    return {name: (set(a.actives), set(a.standbys)) for name, a in done.items()}


# Soak run 7 before its SIGKILL: the dead worker held 1, 2 and 3 active.
SURVIVORS = {"w0": ({5, 6, 7}, {1, 2, 3}), "w2": ({0, 4}, {5, 6})}


def test_faust_alone_recovers_two_of_the_dead_workers_partitions_from_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name, method in FAUST_ASSIGNOR.items():
        monkeypatch.setattr(CopartitionedAssignor, name, method)
    after = assign(SURVIVORS)
    assert len(after["w0"][0]) == 4  # the cap: one promoted
    assert len({1, 2, 3} & after["w2"][0]) == 2  # two where no standby was


def test_every_orphan_goes_to_the_worker_with_its_standby(monkeypatch: pytest.MonkeyPatch) -> None:
    _patched(monkeypatch)
    after = assign(SURVIVORS)
    assert after["w0"][0] == {1, 2, 3, 5, 6, 7}
    assert after["w2"][0] == {0, 4}
    assert after["w2"][1] == {1, 2, 3, 5, 6, 7}  # a standby for each of them elsewhere
    assert all(not (a & s) for a, s in after.values())  # no partition active and standby


def test_the_rejoining_worker_gets_its_share_back(monkeypatch: pytest.MonkeyPatch) -> None:
    _patched(monkeypatch)
    after = assign({**assign(SURVIVORS), "w1": (set(), set())})
    assert sorted(len(a) for a, _ in after.values()) == [2, 3, 3]
    assert set().union(*(a for a, _ in after.values())) == set(range(8))


def test_a_joining_worker_still_gets_actives(monkeypatch: pytest.MonkeyPatch) -> None:
    _patched(monkeypatch)
    two = {"a": ({0, 1, 2, 3}, {4, 5, 6, 7}), "b": ({4, 5, 6, 7}, {0, 1, 2, 3})}
    after = assign({**two, "c": (set(), set())})
    assert sorted(len(a) for a, _ in after.values()) == [2, 3, 3]


def _patched(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, method in FAUST_ASSIGNOR.items():
        monkeypatch.setattr(CopartitionedAssignor, name, method)
    monkeypatch.setattr(CopartitionedAssignor, "_sagaline_orphans_promoted", False, raising=False)
    promote_orphans_past_capacity()


@st.composite
def clusters(draw: st.DrawFn) -> dict[str, tuple[set[int], set[int]]]:
    """A group's previous assignment as Faust's leader may find it: each partition active on
    at most one client (or on none: its worker left), standbys elsewhere, clients joining
    with nothing."""
    names = [f"c{i}" for i in range(draw(st.integers(2, 4)))]
    owner = {p: draw(st.sampled_from([*names, None])) for p in range(8)}
    clients: dict[str, tuple[set[int], set[int]]] = {n: (set(), set()) for n in names}
    for p, who in owner.items():
        if who is not None:
            clients[who][0].add(p)
        spare = [n for n in names if n != who]
        if draw(st.booleans()):
            clients[draw(st.sampled_from(spare))][1].add(p)
    return clients


@settings(max_examples=300, deadline=None)
@given(clusters())
def test_every_assignment_ends_whole(cluster: dict[str, tuple[set[int], set[int]]]) -> None:
    with pytest.MonkeyPatch.context() as monkeypatch:
        _patched(monkeypatch)
        signal.signal(signal.SIGALRM, _too_long)
        signal.alarm(2)  # Faust's eviction loop can turn forever: a bound, not a timing
        try:
            after = assign(cluster)
        finally:
            signal.alarm(0)
    actives = [p for a, _ in after.values() for p in a]
    assert sorted(actives) == list(range(8))  # each partition active exactly once
    for p in range(8):  # one standby each, never beside its active
        assert sum(p in s for _, s in after.values()) == 1
    assert all(not (a & s) for a, s in after.values())
    before_orphans = set(range(8)) - {p for a, _ in cluster.values() for p in a}
    for p in before_orphans:  # an orphan with a standby goes to a standby's worker
        holders = {n for n, (_, s) in cluster.items() if p in s}
        if holders:
            assert any(p in after[n][0] for n in holders), (p, cluster, after)


def _too_long(signum: int, frame: Any) -> None:
    raise TimeoutError("the assignment did not end")
