"""One memory budget for every RocksDB the worker process opens.

Faust opens one RocksDB per table and partition, and on the rocksdict path (its RocksDB
options' ``as_options``) gives each its own memtables and a new block cache of its own: the
bound is tables x partitions x (memtables + cache), 768 MiB for 48 databases at the old
defaults, and a worker's RSS climbs towards it for hours (BENCHMARKS.md, "Worker memory
over a 30-minute soak"). Faust ignores any other RocksDB
option passed through a table's ``options`` on that path, so the budget needs this store.

A :class:`MemoryBudget` is one ``rocksdict.Cache`` and one ``WriteBufferManager`` charged to
it. :class:`BudgetedStore` (registered as the ``sagaline-rocksdb`` store) opens every database
with both, and with index and filter blocks kept in the cache, so memtables, data blocks
and index/filter blocks are all charged to that one capacity, whatever the number of tables
and partitions. Not in the budget: SST files on disk, the few table-reader bytes RocksDB
keeps outside the cache, and memory glibc holds on its free lists after RocksDB frees it.
The cache's limit is not strict (a reservation can overshoot it briefly), and the memtable
limit is soft: writers are not stalled, since a stall would block Faust's event loop (and
could wait on databases nobody writes to); the manager flushes instead. Measured with
random 1 KB values written as fast as one thread can (tests/unit/test_rocksdb_budget.py,
12 databases in 16 MiB), the cache peaked 9-40% over the budget while flushes waited for
the shared CPU, and came back within 1 MiB of it once they caught up; 48 databases at the
defaults (64 MiB) peaked at 58-68 MiB. Each open database's memtable has a floor of a few
hundred KiB, so a budget much below ~1 MiB per open database is not held: 48 databases in
an 8 MiB budget reached ~27 MiB.
"""

from __future__ import annotations

from typing import Any

import rocksdict

from services.worker.faust_seam import (
    RocksDictStore,
    StoreMisconfigured,
    StoreOptions,
    register_store,
)

STORE_SCHEME = "sagaline-rocksdb"
BUDGET_OPTION = "memory_budget"
"""The key of a table's ``options`` that carries its :class:`MemoryBudget`."""

MEMTABLE_SHARE = 2
"""Memtables may take 1/MEMTABLE_SHARE of the budget before the manager flushes them early;
the rest is for data, index and filter blocks. Under a write burst memtables can pass
their share (flushes run in the background); they are charged to the cache all the same,
which then evicts blocks to make room."""


def store_url(table_name: str) -> str:
    """The store URL of a table: its name as the path, as Faust's ``rocksdb://`` gets it, so
    the databases stay where they were (``<tabledir>/<table>-<partition>.db``). Not a bare
    ``sagaline-rocksdb://``: a yarl URL with neither host nor path is false, and Faust's
    ``table._store or app.conf.store`` would silently fall back to the app's store."""
    return f"{STORE_SCHEME}:{table_name}"


class MemoryBudget:
    """The memory every RocksDB of one process shares: a block cache of ``total_bytes``
    and a write buffer manager that charges the memtables to that same cache (so the cache
    evicts blocks as memtables grow, and the two together stay near ``total_bytes``)."""

    def __init__(self, total_bytes: int) -> None:
        self.total_bytes = total_bytes
        self.cache = rocksdict.Cache(total_bytes)
        self.write_buffers = rocksdict.WriteBufferManager.new_write_buffer_manager_with_cache(
            total_bytes // MEMTABLE_SHARE, False, self.cache
        )


class BudgetedRocksDBOptions(StoreOptions):
    """Faust's options for one database, opened inside ``budget`` instead of with a cache of
    its own. Faust's ``open`` (read-write, TTL) is kept; only the options differ."""

    def __init__(self, budget: MemoryBudget, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.budget = budget

    def as_options(self) -> rocksdict.Options:
        # Faust's own rocksdict options, with the shared cache and manager in place of the
        # per-database cache (block_cache_size is not used).
        options = rocksdict.Options(raw_mode=True)
        options.create_if_missing(True)
        # Faust's default is 90% of the process's limit; None (no limit known): RocksDB's -1.
        options.set_max_open_files(-1 if self.max_open_files is None else self.max_open_files)
        options.set_write_buffer_size(self.write_buffer_size)
        options.set_target_file_size_base(self.target_file_size_base)
        options.set_max_write_buffer_number(self.max_write_buffer_number)
        options.set_write_buffer_manager(self.budget.write_buffers)
        tables = rocksdict.BlockBasedOptions()
        tables.set_bloom_filter(self.bloom_filter_size, block_based=True)
        tables.set_block_cache(self.budget.cache)
        # Index and filter blocks in the cache, counted in the budget: otherwise each open
        # SST file's are held outside it ("table readers") and grow with the data.
        tables.set_cache_index_and_filter_blocks(True)
        # Not pinned (set_pin_l0_filter_and_index_blocks_in_cache): a pinned block cannot
        # be evicted and would push the cache over its capacity.
        tables.set_index_type(rocksdict.BlockBasedIndexType.binary_search())
        options.set_block_based_table_factory(tables)
        return options


class BudgetedStore(RocksDictStore):
    """Faust's RocksDB store, every database of it opened inside the table's
    ``options[BUDGET_OPTION]``. Use it with ``app.Table(name, store=store_url(name),
    options={BUDGET_OPTION: budget, ...})``, the same budget for every table."""

    def database_options(self, options: dict[str, Any]) -> BudgetedRocksDBOptions:
        budget = options.pop(BUDGET_OPTION, None)
        if not isinstance(budget, MemoryBudget):
            raise StoreMisconfigured(f"{STORE_SCHEME} needs options[{BUDGET_OPTION!r}]")
        return BudgetedRocksDBOptions(budget, **options, use_rocksdict=True)


register_store(STORE_SCHEME, f"{__name__}:{BudgetedStore.__name__}")
