"""Where each partition of a copartitioned group runs after a rebalance: on a worker that
already holds a copy of its tables whenever one can take it.

Faust's assignor keeps every active where it was within a capacity of ceil(partitions /
workers), then places the others one by one, promoting a standby only if its holder is
under that capacity; when the standbys of a dead worker's partitions sit on one survivor, one
of them goes to a worker with no copy, which replays its changelog from offset 0. Here the
actives are placed all at once, as a minimum-cost flow, no worker above the capacity, by
these costs in this order (each one outweighs every sum of the next ones):

1. a partition on a worker with no copy of it (a replay from offset 0);
2. a partition moved to another worker that holds it (a standby's holder: its changelog's
   tail only, a handover);
3. balance within the capacity (a worker's k-th partition costs k).

So a dead worker's partitions go to their standbys' holders even if that means moving a
survivor's active to the holder of its standby to stay within the capacity; a worker that
joins with nothing gets what the capacity forces off the others (a replay there is the
price of joining). The capacity is a bound, never a cost: Faust places the standbys after
the actives, at most ``capacity x replicas`` a worker and never beside the partition's
active, and a worker above the capacity can leave its partitions' standbys nowhere to go
(Faust's round robin then loops for ever on the group leader's consumer thread: the fault
harness with three workers found it, a restarted empty worker beside one holding every copy).
Pure: no Faust; ``faust_seam`` applies it to Faust's assignor.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class Held:
    """What a worker held in the last generation: actives and standbys (partitions)."""

    actives: frozenset[int] = frozenset()
    standbys: frozenset[int] = frozenset()


def place_actives(partitions: int, held: Mapping[str, Held], capacity: int) -> dict[str, set[int]]:
    """Each worker's actives, at most ``capacity``: every partition once, by the costs of the
    module's docstring; ties go the same way for the same input (workers in sorted order)."""
    if not held:
        raise ValueError("no worker to place partitions on")
    workers = sorted(held)
    move = partitions**2 + 1  # more than any sum of balance costs (k for a k-th partition)
    fresh = (partitions + 1) * move  # more than any sum of moves and balance
    flow = _Flow(partitions, workers)
    for p in range(partitions):
        flow.edge(flow.source, p, 1, 0)
        for w in workers:
            if p in held[w].actives:
                flow.edge(p, flow.worker(w), 1, 0)
            elif p in held[w].standbys:
                flow.edge(p, flow.worker(w), 1, move)
        flow.edge(p, flow.anywhere, 1, fresh)
    for w in workers:
        flow.edge(flow.anywhere, flow.worker(w), capacity, 0)
        for k in range(capacity):
            flow.edge(flow.worker(w), flow.sink, 1, k)
    flow.run(partitions)
    return flow.placements()


def standbys_kept(
    held: Mapping[str, Held], actives: Mapping[str, set[int]], replicas: int, limit: int
) -> dict[str, set[int]]:
    """Each worker's standbys to keep before the missing ones are placed: its standbys that
    it is not now active for, and a partition it was active for and lost (its copy is whole)
    where the partition has fewer than ``replicas`` and the worker fewer than ``limit``."""
    kept = {w: set(held[w].standbys) - actives.get(w, set()) for w in sorted(held)}
    for w in sorted(held):
        while len(kept[w]) > limit:
            kept[w].remove(max(kept[w]))
    count = {p: sum(p in s for s in kept.values()) for s in kept.values() for p in s}
    for w in sorted(held):
        for p in sorted(held[w].actives - actives.get(w, set())):
            if count.get(p, 0) < replicas and len(kept[w]) < limit:
                kept[w].add(p)
                count[p] = count.get(p, 0) + 1
    return kept


class _Flow:
    """A minimum-cost flow network: source -> partitions -> workers -> sink. A partition
    reaches a worker holding a copy directly and any worker through "anywhere"; a worker
    passes at most its capacity on to the sink. Solved by successive
    shortest paths (Bellman-Ford: residual edges have negative costs); small, a few edges
    per partition and per worker's slot."""

    def __init__(self, partitions: int, workers: list[str]) -> None:
        self._partitions = partitions
        self.source, self.sink, self.anywhere = partitions, partitions + 1, partitions + 2
        self._workers = {w: partitions + 3 + i for i, w in enumerate(workers)}
        self._out: list[list[int]] = [[] for _ in range(partitions + 3 + len(workers))]
        self._to: list[int] = []
        self._room: list[int] = []
        self._cost: list[int] = []

    def worker(self, w: str) -> int:
        """Partitions reach a worker here, within its capacity."""
        return self._workers[w]

    def edge(self, a: int, b: int, room: int, cost: int) -> None:
        """An edge and its residual twin (edge ``e`` and ``e ^ 1``)."""
        for frm, to, r, c in ((a, b, room, cost), (b, a, 0, -cost)):
            self._out[frm].append(len(self._to))
            self._to.append(to)
            self._room.append(r)
            self._cost.append(c)

    def run(self, units: int) -> None:
        for _ in range(units):
            path = self._cheapest_path()
            if path is None:
                raise ValueError("the partitions do not fit on the workers")
            for e in path:
                self._room[e] -= 1
                self._room[e ^ 1] += 1

    def _cheapest_path(self) -> list[int] | None:
        n = len(self._out)
        dist: list[int | None] = [None] * n
        via = [-1] * n
        dist[self.source] = 0
        for _ in range(n):
            changed = False
            for node, edges in enumerate(self._out):
                here = dist[node]
                if here is None:
                    continue
                for e in edges:
                    to, there = self._to[e], dist[self._to[e]]
                    if self._room[e] > 0 and (there is None or here + self._cost[e] < there):
                        dist[to], via[to], changed = here + self._cost[e], e, True
            if not changed:
                break
        if dist[self.sink] is None:
            return None
        path, node = [], self.sink
        while node != self.source:
            path.append(via[node])
            node = self._to[via[node] ^ 1]
        return path

    def _flowing(self, frm: int) -> list[tuple[int, int]]:
        """(node, units) that ``frm``'s forward edges carry."""
        return [
            (self._to[e], self._room[e ^ 1])
            for e in self._out[frm]
            if e % 2 == 0 and self._room[e ^ 1] > 0
        ]

    def placements(self) -> dict[str, set[int]]:
        """Each worker's partitions: those that reached it directly, and as many of those
        that went "anywhere" as "anywhere" sent it (any of them: all cost the same)."""
        by_node = {node: w for w, node in self._workers.items()}
        placed: dict[str, set[int]] = {w: set() for w in self._workers}
        fresh = []
        for p in range(self._partitions):
            for node, _ in self._flowing(p):
                if node == self.anywhere:
                    fresh.append(p)
                else:
                    placed[by_node[node]].add(p)
        for node, units in self._flowing(self.anywhere):
            placed[by_node[node]].update(fresh[:units])
            fresh = fresh[units:]
        return placed
