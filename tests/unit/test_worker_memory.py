"""The worker's opt-in memory gauges, read from real RocksDB databases opened the way the
worker's store opens a table partition (rocksdict, the worker's options, one shared budget)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
from rocksdict import Rdict

from runtime.settings import Settings
from services.worker.faust_app import MIB, _rocksdb_options
from services.worker.memory import malloc_stats, open_rocksdbs, rocksdb_memory
from services.worker.prometheus import WorkerPrometheus
from services.worker.rocksdb_budget import BUDGET_OPTION, BudgetedRocksDBOptions, MemoryBudget

pytestmark = pytest.mark.unit


def _options(settings: Settings, budget: MemoryBudget) -> BudgetedRocksDBOptions:
    """What :class:`~services.worker.rocksdb_budget.BudgetedStore` opens a partition with."""
    options = _rocksdb_options(settings, budget)
    return BudgetedRocksDBOptions(options.pop(BUDGET_OPTION), **options)


def test_rocksdb_memory_is_read_from_every_open_partition(tmp_path: Path) -> None:
    budget = MemoryBudget(64 * MIB)
    options = _options(Settings(rocksdb_write_buffer_mb=1), budget)
    dbs: dict[int, Rdict] = {p: options.open(tmp_path / f"p{p}") for p in range(2)}
    try:
        for db in dbs.values():
            for i in range(2000):
                db[f"k{i}".encode()] = b"x" * 200
        one = rocksdb_memory([dbs[0]])
        both = rocksdb_memory(dbs.values())
        assert one["memtables"] > 2000 * 200  # the writes sit in the memtable
        assert both["memtables"] > one["memtables"]

        dbs[0].flush()  # an SST file now, with a table reader; the memtable is empty again
        for i in range(0, 2000, 10):
            assert dbs[0][f"k{i}".encode()] == b"x" * 200
        flushed = rocksdb_memory([dbs[0]])
        assert flushed["sst_files"] > 0
        assert flushed["table_readers"] > 0
        assert flushed["block_cache"] > 0  # the reads went through the block cache
        assert flushed["memtables"] < one["memtables"]

        # One cache for both, read once (not twice), less the memtables charged to it.
        both = rocksdb_memory(dbs.values())
        assert both["block_cache"] + both["memtables"] == budget.cache.get_usage()

        # Faust's store keeps its partitions' databases in ``_dbs``: what the worker reads.
        tables = [SimpleNamespace(data=SimpleNamespace(_dbs=dbs)), SimpleNamespace(data={})]
        assert len(open_rocksdbs(tables)) == 2
    finally:
        for db in dbs.values():
            db.close()


def test_memory_gauges_appear_only_once_measured(tmp_path: Path) -> None:
    prom = WorkerPrometheus()
    assert prom.registry.get_sample_value("sagaline_worker_python_allocated_blocks") is None
    db = _options(Settings(), MemoryBudget(64 * MIB)).open(tmp_path / "p0")
    try:
        db[b"k"] = b"v" * 1000
        prom.measure_memory([db])
    finally:
        db.close()
    value = prom.registry.get_sample_value
    assert value("sagaline_worker_rocksdb_open_databases") == 1
    memtables = value("sagaline_worker_rocksdb_memory_bytes", {"kind": "memtables"})
    assert memtables is not None and memtables > 1000
    assert value("sagaline_worker_rocksdb_memory_bytes", {"kind": "block_cache"}) is not None
    blocks = value("sagaline_worker_python_allocated_blocks")
    assert blocks is not None and blocks > 10_000  # an interpreter with pydantic and faust
    if malloc_stats() is not None:  # glibc
        in_use = value("sagaline_worker_malloc_bytes", {"state": "in_use"})
        assert in_use is not None and in_use > 0
