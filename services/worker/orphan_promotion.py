"""A dead worker's partitions go to the workers that hold their standbys, whatever their load.

Faust's assignor (``faust.assignor.copartitioned_assignor.CopartitionedAssignor``) gives a
partition without an active owner to a worker holding its standby only while that worker is
under ``ceil(partitions / workers)`` actives; otherwise to any worker under it, which then
recovers the partition from the start of its changelog. With three workers, eight
partitions and one standby each, a dead worker's three partitions meet two survivors with
three actives each, a cap of four: one is promoted, two are recovered from nothing (soak run
7, BENCHMARKS.md: partitions 2 and 3, whose standby was on the first worker, recovered 181,064
records on the second, and processed again 32.7 s after the SIGKILL against the 20 s bound).

Here a partition that no worker held active before the assignment (an orphan: its worker
died or left) goes to a worker holding its standby even past that cap. Balance comes back at
the next assignment, when Faust trims every worker to the cap (the replaced worker rejoining,
typically): the trimmed partitions are not orphans and follow Faust's rules. Partitions
moved for balance (a worker joining) are never orphans, so a join still spreads the actives.
A worker already past the cap counts as full for every other placement (Faust tests
``== cap``, which a worker past it would fail and so take more). And while one is past it,
the standbys are not capped: the other workers must hold the standbys of all its actives
(Faust's cap of ``cap x replicas`` standbys would leave one unplaceable, and its eviction
loop would turn forever: the hang an earlier, larger placement met, BENCHMARKS.md "Failover
with a standby-first assignor"; that one moved every active by a minimum-cost flow and was
taken back while three workers with standbys had defects of their own, since fixed).
"""

from __future__ import annotations

from collections.abc import Iterator, MutableMapping
from typing import Any

from services.worker.faust_seam import CopartitionedAssignment, CopartitionedAssignor

_ORPHANS = "_sagaline_orphans"

FAUST_ASSIGNOR: dict[str, Any] = {
    name: getattr(CopartitionedAssignor, name)
    for name in (
        "get_assignment",
        "_find_promotable_standby",
        "_client_exhausted",
        "_get_client_limit",
    )
}
"""Faust's own methods, as this module found them (the patch wraps them)."""


def promote_orphans_past_capacity() -> None:
    """Patch Faust's assignor as the module's docstring says (idempotent; only the group's
    leader, which computes the assignment, runs it)."""
    if getattr(CopartitionedAssignor, "_sagaline_orphans_promoted", False):
        return
    get_assignment = FAUST_ASSIGNOR["get_assignment"]
    find_standby = FAUST_ASSIGNOR["_find_promotable_standby"]
    get_client_limit = FAUST_ASSIGNOR["_get_client_limit"]

    def get_assignment_noting_orphans(
        self: CopartitionedAssignor,
    ) -> MutableMapping[str, CopartitionedAssignment]:
        clients = self._client_assignments.values()
        setattr(self, _ORPHANS, standby_holders(clients, orphans(clients, self.num_partitions)))
        assignment: MutableMapping[str, CopartitionedAssignment] = get_assignment(self)
        return assignment

    def find_promotable_standby(
        self: CopartitionedAssignor, partition: int, candidates: Iterator[CopartitionedAssignment]
    ) -> CopartitionedAssignment | None:
        found: CopartitionedAssignment | None = find_standby(self, partition, candidates)
        holders: list[CopartitionedAssignment] | None = getattr(self, _ORPHANS, {}).get(partition)
        if found is not None or not holders:
            return found
        holder = min(holders, key=lambda c: len(c.actives))
        # Faust trims a worker's standbys to its cap before it assigns, arbitrarily: the
        # holder's store is as current either way. Faust takes the standby off the worker it
        # promotes, so it is put back first.
        holder.assign_partition(partition, active=False)
        return holder

    def client_exhausted(
        self: CopartitionedAssignor,
        assignment: CopartitionedAssignment,
        active: bool,
        client_limit: int | None = None,
    ) -> bool:
        limit = self._get_client_limit(active) if client_limit is None else client_limit
        return assignment.num_assigned(active) >= limit

    def client_limit(self: CopartitionedAssignor, active: bool) -> int:
        clients = self._client_assignments.values()
        if not active and any(len(c.actives) > self.max_capacity for c in clients):
            return self.num_partitions
        limit: int = get_client_limit(self, active)
        return limit

    patched: Any = CopartitionedAssignor
    patched.get_assignment = get_assignment_noting_orphans
    patched._find_promotable_standby = find_promotable_standby
    patched._client_exhausted = client_exhausted
    patched._get_client_limit = client_limit
    patched._sagaline_orphans_promoted = True


def orphans(clients: Any, partitions: int) -> set[int]:
    """The partitions no client (``CopartitionedAssignment``) holds active."""
    held: set[int] = set()
    for client in clients:
        held |= client.actives
    return set(range(partitions)) - held


def standby_holders(clients: Any, partitions: set[int]) -> dict[int, list[CopartitionedAssignment]]:
    """For each of ``partitions``, the clients that held it as a standby."""
    return {p: [c for c in clients if c.partition_assigned(p, active=False)] for p in partitions}
