"""Where the worker's memory is: RocksDB's own accounting, the Python object allocator, malloc.

An opt-in diagnostic (``SAGALINE_WORKER_MEMORY_METRICS``), measured when ``/metrics`` is
scraped and never in between. It exists because RSS alone cannot say whether a growing
worker is filling bounded caches (settling) or leaking (BENCHMARKS.md, "Worker memory over
a 30-minute soak"). Every number here is cheap to read, with no tracing:

- RocksDB: each open database's own memory properties (rocksdict's ``property_int_value``):
  memtables and table readers (what a table file keeps outside the cache), summed over
  every table partition this worker has open, and the block cache, which every database
  shares (:mod:`services.worker.rocksdb_budget`), read once.
- Python: ``sys.getallocatedblocks()``, the number of live blocks of the object allocator
  (pymalloc's small blocks and the large ones it hands to malloc). A count, not bytes: bytes
  would need tracemalloc, which slows every allocation. A flat count under steady load says
  the Python side holds no more objects than it did; a rising one is a Python leak.
- malloc: glibc's ``mallinfo2()`` over all arenas, bytes handed out and bytes held free (kept
  by malloc, not returned to the OS: fragmentation shows here). This is the C heap of the
  whole process (Python's large objects, RocksDB, the Kafka client's buffers); pymalloc's
  own arenas are mmapped and not in it. Absent where the C library has no ``mallinfo2``.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Protocol

from services.worker.faust_seam import open_partition_dbs

ROCKSDB_PROPERTIES = {
    "memtables": "rocksdb.cur-size-all-mem-tables",
    "table_readers": "rocksdb.estimate-table-readers-mem",
    "block_cache": "rocksdb.block-cache-usage",
}
"""What a worker's RocksDB holds in memory, by the ``kind`` label it is exported under."""
SST_PROPERTY = "rocksdb.total-sst-files-size"


class PropertyDB(Protocol):
    """An open RocksDB (rocksdict's ``Rdict``), as far as its properties go."""

    def property_int_value(self, name: str) -> int | None: ...


def rocksdb_memory(dbs: Iterable[PropertyDB]) -> dict[str, int]:
    """RocksDB's memory by kind, and its files on disk (``sst_files``), over ``dbs``, which
    share one block cache (the worker's :class:`~services.worker.rocksdb_budget.MemoryBudget`).

    Memtables, table readers and SST files are each database's own: summed. The cache is
    one: every database reports the same usage, so it is read once, not once per database.
    Its usage also holds the memtables, which the write buffer manager charges to it; they
    are taken out of ``block_cache`` so that the kinds add up to what RocksDB holds (the
    charge is reserved in 256 KiB steps and still counts memtables being flushed, so a
    little of them may remain in ``block_cache``)."""
    totals = dict.fromkeys([*ROCKSDB_PROPERTIES, "sst_files"], 0)
    cache_usage = 0
    for i, db in enumerate(dbs):
        if i == 0:
            cache_usage = db.property_int_value(ROCKSDB_PROPERTIES["block_cache"]) or 0
        for kind in ("memtables", "table_readers"):
            totals[kind] += db.property_int_value(ROCKSDB_PROPERTIES[kind]) or 0
        totals["sst_files"] += db.property_int_value(SST_PROPERTY) or 0
    totals["block_cache"] = max(cache_usage - totals["memtables"], 0)
    return totals


def open_rocksdbs(tables: Iterable[Any]) -> list[PropertyDB]:
    """The databases Faust has open for ``tables`` (one per assigned partition). Empty for a
    table on another store (``memory://``)."""
    dbs: list[PropertyDB] = []
    for table in tables:
        opened = open_partition_dbs(table.data)
        dbs.extend(db for db in list(opened.values()) if hasattr(db, "property_int_value"))
    return dbs


class _MallInfo2(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_size_t)
        for name in (
            "arena",
            "ordblks",
            "smblks",
            "hblks",
            "hblkhd",
            "usmblks",
            "fsmblks",
            "uordblks",
            "fordblks",
            "keepcost",
        )
    ]


@dataclass(frozen=True)
class Malloc:
    in_use: int
    """Bytes handed out: ``uordblks`` (arenas) + ``hblkhd`` (direct mmaps)."""
    free: int
    """Bytes malloc holds free in its arenas (``fordblks``): resident if touched, reusable."""


def _mallinfo2() -> Any:
    path = ctypes.util.find_library("c")
    if path is None:
        return None
    fn = getattr(ctypes.CDLL(path), "mallinfo2", None)
    if fn is not None:
        fn.restype = _MallInfo2
    return fn


_MALLINFO2 = _mallinfo2()


def malloc_stats() -> Malloc | None:
    """glibc's view of the C heap, or None without ``mallinfo2`` (glibc < 2.33, musl)."""
    if _MALLINFO2 is None:
        return None
    info = _MALLINFO2()
    return Malloc(in_use=info.uordblks + info.hblkhd, free=info.fordblks)


def python_allocated_blocks() -> int:
    return sys.getallocatedblocks()
