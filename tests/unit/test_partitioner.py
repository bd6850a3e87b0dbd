"""The worker's partitioner must pick the partition every other producer picks for a key."""

from __future__ import annotations

import random

from aiokafka.partitioner import DefaultPartitioner

from runtime.partitioner import partition_for


def test_it_picks_what_kafkas_default_partitioner_picks_for_every_key() -> None:
    rng = random.Random(7)
    default = DefaultPartitioner()
    keys = [f"p{n}".encode() for n in range(500)] + [
        rng.randbytes(rng.randrange(0, 300)) for _ in range(2000)
    ]
    for count in (1, 3, 8, 12, 64):
        partitions = list(range(count))
        for key in keys + keys:  # the second pass is served from the cache
            assert partition_for(key, partitions, partitions) == default(
                key, partitions, partitions
            )


def test_it_indexes_the_topics_partitions_not_a_count() -> None:
    # Partition ids as the metadata lists them: the index picks among them.
    assert partition_for(b"p1", [0, 1, 2, 3], []) in {0, 1, 2, 3}
    assert partition_for(b"p1", [5, 6], [5, 6]) == DefaultPartitioner()(b"p1", [5, 6], [5, 6])


def test_a_record_without_a_key_goes_to_an_available_partition() -> None:
    assert all(partition_for(None, [0, 1, 2], [2]) == 2 for _ in range(20))
