"""Kafka's default partitioner with the key's hash remembered.

A key chooses its partition by murmur2, which aiokafka computes in pure Python: ~2% of the
worker's time at 300 sagas/s (py-spy), for keys that repeat (a product's id on every
reserve, a saga's id on each of its replies, an entity's key on each of its events). The
partition must stay exactly the one every other producer picks for the key (the API's, the
Java clients'), or a key's records would split across partitions and lose their order: only
the hash is cached, and the partition is taken from the topic's partitions as aiokafka's
:class:`~aiokafka.partitioner.DefaultPartitioner` takes it.
"""

from __future__ import annotations

import functools
import random
from collections.abc import Sequence

from aiokafka.partitioner import murmur2

HASHES_KEPT = 65_536


@functools.lru_cache(maxsize=HASHES_KEPT)
def _positive_hash(key: bytes) -> int:
    return int(murmur2(key)) & 0x7FFFFFFF


def partition_for(
    key: bytes | None, all_partitions: Sequence[int], available: Sequence[int]
) -> int:
    """The partition of ``key`` among ``all_partitions`` (sorted by id), as Kafka's default
    partitioner chooses it; a record without a key goes to a random available one."""
    if key is None:
        return random.choice(available or all_partitions)
    return all_partitions[_positive_hash(key) % len(all_partitions)]
