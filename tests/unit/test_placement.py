"""After a rebalance each partition runs on a worker holding a copy of its tables whenever
one can take it (services/worker/placement.py, applied to Faust's assignor by
services/worker/faust_seam.py): the issue-25 failover where Faust's own assignor sent one of
a dead worker's partitions to a survivor without a copy, which replayed it from offset 0."""

from __future__ import annotations

import itertools
import threading
from typing import Any

import faust.assignor.partition_assignor
import pytest
from faust.assignor.client_assignment import CopartitionedAssignment
from faust.assignor.copartitioned_assignor import CopartitionedAssignor
from hypothesis import given, settings
from hypothesis import strategies as st

from services.worker import faust_app, faust_seam
from services.worker.placement import Held, place_actives, standbys_kept

pytestmark = pytest.mark.unit


def held(actives: set[int], standbys: set[int]) -> Held:
    return Held(frozenset(actives), frozenset(standbys))


# Three workers, six partitions, one standby each; the second worker (b: 1 and 4) died and
# both standbys of its partitions were on the third (c), as in the benchmark's run.
SURVIVORS = {"a": held({0, 3}, {2, 5}), "c": held({2, 5}, {1, 4})}


def copies(placed: dict[str, set[int]], before: dict[str, Held]) -> bool:
    return all(p in before[w].actives | before[w].standbys for w, ps in placed.items() for p in ps)


def test_a_dead_workers_partitions_go_to_their_standbys_within_the_capacity() -> None:
    placed = place_actives(6, SURVIVORS, capacity=3)
    # c takes 1 and 4 from its standbys and hands one of its own to a, which stands by for it
    assert placed == {"a": {0, 2, 3}, "c": {1, 4, 5}}
    assert copies(placed, SURVIVORS)


def test_faust_s_own_assignor_sends_one_of_them_to_the_worker_without_a_copy() -> None:
    """The cause, as found in faust/assignor/copartitioned_assignor.py: the actives stay
    where they were, then c is promoted for 1 and is then at max_capacity (3), so 4 goes round
    robin to a, which holds no copy of it."""
    clients = {
        w: CopartitionedAssignment(set(h.actives), set(h.standbys)) for w, h in SURVIVORS.items()
    }
    faust_s = CopartitionedAssignor({"t"}, clients, num_partitions=6, replicas=1).get_assignment()
    assert faust_s["a"].actives == {0, 3, 4} and faust_s["c"].actives == {1, 2, 5}


def test_split_standbys_are_promoted_where_they_are_and_no_survivor_moves() -> None:
    before = {"a": held({0, 3}, {1, 5}), "c": held({2, 5}, {4, 0})}
    assert place_actives(6, before, capacity=3) == {"a": {0, 1, 3}, "c": {2, 4, 5}}


def test_nothing_moves_when_no_worker_left() -> None:
    before = {"a": held({0, 3}, {2, 4}), "b": held({1, 4}, {0, 5}), "c": held({2, 5}, {1, 3})}
    assert place_actives(6, before, capacity=2) == {"a": {0, 3}, "b": {1, 4}, "c": {2, 5}}


def test_a_holder_never_goes_above_the_capacity_even_to_spare_a_replay() -> None:
    # four workers, eight partitions; d died; both standbys of d's partitions are on a, and
    # the standbys of a's own are on d: a keeps its own and takes one of d's, the other
    # goes to a worker without a copy (above the capacity, Faust could not place standbys)
    before = {
        "a": held({0, 1}, {6, 7}),
        "b": held({2, 3}, {4, 5}),
        "c": held({4, 5}, {2, 3}),
    }
    placed = place_actives(8, before, capacity=3)
    assert max(len(ps) for ps in placed.values()) == 3
    assert placed["a"] in ({0, 1, 6}, {0, 1, 7}) and placed["b"] >= {2, 3}
    assert placed["c"] >= {4, 5}


def test_a_restarted_empty_worker_beside_one_holding_every_copy_is_placed_without_a_hang() -> None:
    """What the fault harness with three workers found: its restarted worker held nothing,
    the other held every partition (two actives, two standbys); with the two orphans placed
    above the capacity on the holder, Faust's standby round robin had nowhere to put their
    standbys and looped for ever (on the group leader's consumer thread)."""
    before = {"holder": held({0, 1}, {2, 3}), "restarted": held(set(), set())}
    assert place_actives(4, before, capacity=2) == {"holder": {0, 1}, "restarted": {2, 3}}
    clients = {
        w: CopartitionedAssignment(set(h.actives), set(h.standbys)) for w, h in before.items()
    }
    done: list[Any] = []
    assignor = faust_seam.StandbyFirstAssignor({"t"}, clients, num_partitions=4, replicas=1)
    worker = threading.Thread(target=lambda: done.append(assignor.get_assignment()), daemon=True)
    worker.start()
    worker.join(10)
    assert done, "the assignment did not finish in 10 s"
    placed = done[0]
    assert {w: a.actives for w, a in placed.items()} == {"holder": {0, 1}, "restarted": {2, 3}}
    assert {w: a.standbys for w, a in placed.items()} == {"holder": {2, 3}, "restarted": {0, 1}}


def test_a_new_worker_takes_only_what_the_capacity_forces_off_the_others() -> None:
    before = {
        "a": held({0, 2, 3}, {1, 4, 5}),
        "c": held({1, 4, 5}, {0, 2, 3}),
        "new": held(set(), set()),
    }
    placed = place_actives(6, before, capacity=2)
    assert sorted(len(ps) for ps in placed.values()) == [2, 2, 2]
    assert placed["a"] <= {0, 2, 3} and placed["c"] <= {1, 4, 5}


def test_a_worker_keeps_standing_by_for_a_partition_it_handed_over() -> None:
    placed = place_actives(6, SURVIVORS, capacity=3)
    kept = standbys_kept(SURVIVORS, placed, replicas=1, limit=3)
    assert kept == {"a": {5}, "c": {2}}  # c's copy of 2 is whole; 0, 1, 3, 4 are Faust's to place


def test_the_seam_s_assignor_places_actives_on_copies_and_one_standby_of_each_elsewhere() -> None:
    clients = {
        w: CopartitionedAssignment(set(h.actives), set(h.standbys)) for w, h in SURVIVORS.items()
    }
    placed = faust_seam.StandbyFirstAssignor(
        {"t"}, clients, num_partitions=6, replicas=1
    ).get_assignment()
    assert {w: a.actives for w, a in placed.items()} == {"a": {0, 2, 3}, "c": {1, 4, 5}}
    assert {w: a.standbys for w, a in placed.items()} == {"a": {1, 4, 5}, "c": {0, 2, 3}}


def test_the_worker_s_faust_places_every_copartitioned_group_with_the_seam_s_assignor() -> None:
    assert faust_app.faust_seam is faust_seam
    assert (
        faust.assignor.partition_assignor.CopartitionedAssignor is faust_seam.StandbyFirstAssignor
    )


# --- against every assignment, for small groups --------------------------------------------


def cost(
    placed: dict[str, set[int]], before: dict[str, Held], capacity: int
) -> tuple[int, ...] | None:
    """The module's order: replays from offset 0, moves, balance (None: above the
    capacity)."""
    if any(len(ps) > capacity for ps in placed.values()):
        return None
    fresh = sum(
        p not in before[w].actives | before[w].standbys for w, ps in placed.items() for p in ps
    )
    moves = sum(p not in before[w].actives for w, ps in placed.items() for p in ps)
    balance = sum(len(ps) * (len(ps) - 1) // 2 for ps in placed.values())
    return fresh, moves, balance


def best(partitions: int, before: dict[str, Held], capacity: int) -> tuple[int, ...]:
    workers = sorted(before)
    costs = (
        cost({w: {p for p, at in enumerate(choice) if at == w} for w in workers}, before, capacity)
        for choice in itertools.product(workers, repeat=partitions)
    )
    return min(c for c in costs if c is not None)


@st.composite
def generations(draw: st.DrawFn) -> tuple[int, dict[str, Held]]:
    partitions = draw(st.integers(1, 6))
    workers = [f"w{i}" for i in range(draw(st.integers(1, 3)))]
    before = {}
    for w in workers:
        actives = draw(st.sets(st.integers(0, partitions - 1)))
        standbys = draw(st.sets(st.integers(0, partitions - 1))) - actives
        before[w] = held(actives, standbys)
    return partitions, before


@settings(max_examples=150, deadline=None)
@given(generations())
def test_every_partition_is_placed_once_at_the_least_cost_there_is(
    generation: tuple[int, dict[str, Held]],
) -> None:
    partitions, before = generation
    capacity = -(-partitions // len(before))
    placed = place_actives(partitions, before, capacity)
    assert sorted(p for ps in placed.values() for p in ps) == list(range(partitions))
    assert cost(placed, before, capacity) == best(partitions, before, capacity)
