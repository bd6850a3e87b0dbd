"""Which partitions of the event topic this projector process applies, and from where.

Several projector processes share the topic through one consumer group; the group hands each
partition to one of them, and this module keeps the process's side of that handover:

- :class:`Owned`: the partitions sought to their stored offsets, with the stored offset each
  one's next batch starts from (what the fence checks, :func:`readside.store.
  advance_checkpoints`), and which records fetched before a seek are stale;
- :class:`Handover`: the rebalance listener; on revocation it waits for the batch in flight
  (bounded), on assignment it seeks each partition to the offset stored with the rows.

Why a rebalance mid-batch neither loses nor doubles an event: SCALING.md beside this file.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from aiokafka import ConsumerRebalanceListener, TopicPartition
from aiokafka.structs import ConsumerRecord

from runtime.settings import Settings

log = logging.getLogger(__name__)

REVOKE_WAIT_S = 10.0
"""How long a revocation waits for the batch in flight before it gives the partitions up
anyway (below aiokafka's 30 s rebalance timeout, so the group never expels a process for
a slow batch; the fence refuses that batch if the next owner commits first)."""


def group_id(settings: Settings) -> str:
    """The projector's consumer group: ``SAGALINE_PROJECTOR_GROUP_ID``, else derived from the
    app id. One group per read-model database: its processes split the partitions."""
    return settings.projector_group_id or f"{settings.app_id}-projector"


@dataclass
class Owned:
    starts: dict[int, int | None] = field(default_factory=dict)
    """Partition -> the stored offset its next batch is read from (None: no row yet), for
    every assigned partition sought to it. A partition is applied only while it is here."""
    unsought: set[int] = field(default_factory=set)
    """Assigned, but the stored offsets could not be read yet: sought before the next fetch."""
    seeks: int = 0
    """Seeks so far, to date each partition's last one (``sought_at``)."""
    sought_at: dict[int, int] = field(default_factory=dict)

    def sought(self, partition: int, stored: int | None) -> None:
        self.seeks += 1
        self.sought_at[partition] = self.seeks
        self.starts[partition] = stored
        self.unsought.discard(partition)

    def to_seek(self, partitions: Iterable[int]) -> None:
        """Read these partitions' stored offsets again before applying them."""
        for p in partitions:
            self.starts.pop(p, None)
            self.unsought.add(p)

    def release(self, partitions: Collection[int]) -> None:
        for p in partitions:
            self.starts.pop(p, None)
            self.unsought.discard(p)
            self.sought_at.pop(p, None)

    def current(
        self, fetched: Mapping[TopicPartition, Sequence[ConsumerRecord]], seen: int
    ) -> dict[TopicPartition, Sequence[ConsumerRecord]]:
        """The fetched records still to apply: of owned partitions not sought again since
        the fetch returned (``seen``: :attr:`seeks` then). A fetch that returned before a
        seek read from the old position (the group's committed offset after an assignment,
        or past a failed batch); aiokafka drops what it had buffered, not what it returned."""
        return {
            tp: records
            for tp, records in fetched.items()
            if records and tp.partition in self.starts and self.sought_at[tp.partition] <= seen
        }

    def advanced(self, next_offsets: Mapping[int, int], epochs: Mapping[int, int]) -> None:
        """A batch committed: its partitions' next batches start where it ended, unless one
        was released or sought again meanwhile (then the stored offset read by that seek,
        or the fence, decides)."""
        for p, offset in next_offsets.items():
            if p in self.starts and self.sought_at.get(p) == epochs.get(p):
                self.starts[p] = offset


class Handover(ConsumerRebalanceListener):  # type: ignore[misc]
    """Called by aiokafka's group coordinator around every rebalance (aiokafka is untyped:
    hence the ignore)."""

    def __init__(
        self,
        revoked: Callable[[set[TopicPartition]], Awaitable[None]],
        assigned: Callable[[set[TopicPartition]], Awaitable[None]],
    ) -> None:
        self._revoked = revoked
        self._assigned = assigned

    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        await self._revoked(set(revoked))

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        await self._assigned(set(assigned))
