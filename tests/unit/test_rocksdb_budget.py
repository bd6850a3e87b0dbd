"""Every RocksDB the worker opens shares one memory budget (services/worker/rocksdb_budget.py):
the worker's own tables, built by ``create_app``, open real databases through the budgeted
store, and writing far more than the budget leaves RocksDB's memory near it."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from rocksdict import Rdict

from runtime.settings import Settings
from sagaline.wiring import build_processes
from services.worker.faust_app import create_app
from services.worker.memory import ROCKSDB_PROPERTIES, rocksdb_memory
from services.worker.rocksdb_budget import BudgetedStore, MemoryBudget

pytestmark = pytest.mark.unit
MIB = 1024 * 1024
CACHE_USAGE = ROCKSDB_PROPERTIES["block_cache"]


def _open_every_partition(settings: Settings) -> Iterator[tuple[list[Any], list[Rdict]]]:
    """The worker's tables (the stores Faust would open) and one database per partition."""
    _, runners = create_app(settings, build_processes(settings))
    stores = [runner.faust_table.data for runner in runners]  # type: ignore[attr-defined]
    dbs = [store._db_for_partition(p) for store in stores for p in range(settings.partitions)]
    try:
        yield stores, dbs
    finally:
        for db in dbs:
            db.close()


@pytest.fixture
def budgeted(tmp_path: Path) -> Iterator[tuple[list[Any], list[Rdict]]]:
    # Two partitions: 12 databases, each with its 1 MiB memtables, inside a 16 MiB budget.
    settings = Settings(
        data_dir=tmp_path,
        store="rocksdb",
        partitions=2,
        rocksdb_memory_mb=16,
        rocksdb_write_buffer_mb=1,
    )
    yield from _open_every_partition(settings)


def test_every_table_partition_shares_one_cache(
    budgeted: tuple[list[Any], list[Rdict]],
) -> None:
    stores, dbs = budgeted
    assert len(stores) > 1 and len(dbs) == len(stores) * 2
    assert all(isinstance(store, BudgetedStore) for store in stores)
    # Where Faust's own rocksdb:// store keeps them: an existing worker's data is found.
    for store in stores:
        path = store.partition_path(1)
        assert path == Path(store.app.conf.tabledir) / f"{store.table.name}-1.db"
        assert path.is_dir()
    budgets = {id(store.rocksdb_options.budget) for store in stores}
    assert len(budgets) == 1  # one budget object for the whole app
    budget: MemoryBudget = stores[0].rocksdb_options.budget
    assert budget.total_bytes == 16 * MIB
    # RocksDB's own view: every database's cache has the budget's capacity...
    assert {db.property_int_value("rocksdb.block-cache-capacity") for db in dbs} == {16 * MIB}
    # ... and it is the same cache: what one database writes, another reports.
    before = dbs[-1].property_int_value(CACHE_USAGE)
    for i in range(2000):
        dbs[0][f"k{i}".encode()] = os.urandom(500)
    usage = {db.property_int_value(CACHE_USAGE) for db in dbs}
    assert len(usage) == 1
    (after,) = usage
    assert before is not None and after is not None and after > before
    assert after == budget.cache.get_usage()  # the memtable is charged to the shared cache
    assert budget.write_buffers.get_usage() >= 2000 * 500
    # The gauges read that cache once, not once per database.
    memory = rocksdb_memory(dbs)
    assert memory["block_cache"] + memory["memtables"] <= after


def _flushes_done(dbs: list[Rdict]) -> bool:
    return not any(
        db.property_int_value("rocksdb.num-running-flushes")
        or db.property_int_value("rocksdb.num-immutable-mem-table")
        for db in dbs
    )


def _read_everything(dbs: list[Rdict], written: int, step: int) -> None:
    """Reads over every key written so far: data, index and filter blocks of the flushed
    files go through the cache."""
    for j in range(written % step, written, step):
        assert dbs[j % len(dbs)][f"k{j:08d}".encode()][:4] == j.to_bytes(4, "big")


def test_writing_far_more_than_the_budget_stays_within_it(
    budgeted: tuple[list[Any], list[Rdict]],
) -> None:
    stores, dbs = budgeted
    budget: MemoryBudget = stores[0].rocksdb_options.budget
    samples: list[dict[str, int]] = []
    written = 0
    while written < 100_000:
        # Random bytes do not compress: the SST files outgrow the budget many times over.
        dbs[written % len(dbs)][f"k{written:08d}".encode()] = written.to_bytes(
            4, "big"
        ) + os.urandom(996)
        written += 1
        if written % 1000 == 0:
            _read_everything(dbs, written, 97)
            samples.append(rocksdb_memory(dbs) | {"cache": budget.cache.get_usage()})
    assert written * 1000 > 5 * budget.total_bytes
    assert rocksdb_memory(dbs)["sst_files"] > 3 * budget.total_bytes  # far more on disk
    peak = max(samples, key=lambda sample: sample["cache"])
    print("peak", {kind: round(n / MIB, 2) for kind, n in peak.items()})
    # While writing as fast as this loop can, memtables are charged as they grow, before
    # the manager's flushes (background threads) free them, and the cache's limit is not
    # strict: on the shared 2-core machine the peak was 9% to 40% over the budget, with
    # flushes waiting for a CPU. Twice the budget is still far under the old per-database
    # bound here, 12 x (2 x 1 MiB + 8 MiB) = 120 MiB, and it does not grow with the data.
    for sample in samples:
        held = sample["memtables"] + sample["block_cache"] + sample["table_readers"]
        assert held <= budget.total_bytes * 2, sample
        assert sample["cache"] <= budget.total_bytes * 2, sample
    assert peak["cache"] > budget.total_bytes * 3 // 4  # used, not left empty

    # Once the flushes have caught up (as they do at a worker's rates), reading everything
    # again keeps the cache at its capacity, blocks evicted to make room: within the budget,
    # give or take the memtables' charge, which is held as pinned 256 KiB entries spread
    # over the cache's shards (one shard can hold more of them than its share of the
    # capacity): up to 1 MiB over in trials, with 7 MiB of memtables left.
    deadline = time.monotonic() + 30
    while not _flushes_done(dbs) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _flushes_done(dbs)
    _read_everything(dbs, written, 13)
    settled = rocksdb_memory(dbs) | {"cache": budget.cache.get_usage()}
    print("settled", {kind: round(n / MIB, 2) for kind, n in settled.items()})
    tolerance = budget.total_bytes // 8
    assert budget.total_bytes * 3 // 4 < settled["cache"] <= budget.total_bytes + tolerance
    assert settled["memtables"] + settled["block_cache"] <= budget.total_bytes + tolerance
    assert settled["block_cache"] > 0
    # Outside the budget: what a table file's reader keeps besides its index and filter
    # blocks (those are in the cache). It grows with the files, but is small beside them.
    assert settled["table_readers"] < settled["sst_files"] // 100
