"""Which changelog records still belong to their partition's current read.

Between the fetcher and a table's store, Faust holds changelog records in four places: the
batch its consumer drains, the hand-over to the topic conductor, the recovery's queue and
the recovery loop's current record. A partition can be sought again, or given a new
assignment, while records of it sit in any of them. Such a record is not part of what the
recovery reads next: applied, it moves the recovery's "seen" offset past records that were
never applied, and the standby or the recovery that follows starts after them
(RELIABILITY.md, defects 13, 14 and 16). The gap-free rule is stated once, here: a record is
handed on and applied only while its partition is still in the read that drained it.

A read is what the Kafka client knows: its state object for the partition in the current
assignment (a new one at each assignment) and how many times that state was sought or reset
(``faust_seam.count_partition_reads``); it goes on while that state's assignment is current
and its count unchanged. Records drained within one read follow each other with no gap,
from the offset the read began at, so a record of the current read always continues what
the recovery has seen.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Hashable, Mapping
from typing import Any
from weakref import WeakKeyDictionary

log = logging.getLogger(__name__)

Read = tuple[object, int]
"""A partition's read: the client's state object for it in this assignment, and how many
times that state had been sought or reset when the read began."""


class ChangelogReads:
    """The reads of one consumer's changelog partitions, and the records stamped with theirs.

    ``read_of(tp)`` gives a partition's current read (None when it is not assigned), and
    ``goes_on(read)`` whether that read is still current: the first is asked once a batch,
    the second for every record at every place, so it must be cheap."""

    def __init__(
        self, read_of: Callable[[Hashable], Read | None], goes_on: Callable[[Read], bool]
    ) -> None:
        self._read_of = read_of
        self._goes_on = goes_on
        self._batch: dict[Hashable, Read | None] = {}
        self._stamps: WeakKeyDictionary[Any, Read] = WeakKeyDictionary()
        self.skipped: Counter[Hashable] = Counter()
        """Records of the current batch not handed on because their read had ended."""

    def drained(self, records: Mapping[Any, Any], is_changelog: Callable[[Any], bool]) -> None:
        """The client has just handed ``records`` over: note each changelog partition's read,
        in the same step (nothing can seek in between)."""
        self._batch = {tp: self._read_of(tp) for tp in records if is_changelog(tp)}
        self.skipped = Counter()

    def hand_on(self, tp: Hashable, message: Any) -> bool:
        """Whether the consumer may hand ``message`` (of the batch last drained) on: it is no
        changelog record, or its partition is still in the read that drained it (and the
        message is stamped with that read for every later place to ask)."""
        if tp not in self._batch:
            return True
        read = self._batch[tp]
        if read is None or not self._goes_on(read):
            self.skipped[tp] += 1
            return False
        self._stamps[message] = read
        return True

    def is_stale(self, message: Any) -> bool:
        """Whether ``message``, handed on earlier, was drained in a read of its partition that
        has ended since. A message never stamped (no changelog record) is never stale."""
        try:
            read = self._stamps.get(message)
        except TypeError:  # not weakly referable: never stamped
            return False
        return read is not None and not self._goes_on(read)

    def report_skipped(self) -> None:
        """Say which records of the last batch were not handed on, once per batch."""
        for tp, count in self.skipped.items():
            log.info(
                "dropped %d changelog record(s) of %s read before the partition was sought "
                "again or reassigned: they are read again from where its recovery starts",
                count,
                tp,
            )
