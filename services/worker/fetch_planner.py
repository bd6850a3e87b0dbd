"""aiokafka's fetch planner, the same decisions at a fraction of the cost.

The fetcher's loop plans before every fetch, and again each time a batch is taken from its
buffer: ``Fetcher._get_actions_per_node`` walks every assigned partition (a worker's
process topics and its tables' changelog partitions, which stay assigned after recovery:
129 with the defaults; Faust pauses the active tables' changelogs in its own set of active
partitions, never in aiokafka's subscription, so aiokafka plans them like any other) and
decides for each whether to fetch it, reset it, back off or wait for it to resume. Below
full load that happens hundreds of times a second for a record or two each time: 10-11% of
the worker's CPU at 40 sagas/s (py-spy, BENCHMARKS.md, issue 27), most of it method calls
per partition (the read replica's, the leader's, the state's) and a debug log call per
fetchable partition whether debug is on or not.

:func:`plan_actions` is that method with the same branches in the same order and the same
result (``tests/unit/test_fetch_planner.py`` compares the two on every branch): the leader
read from the cluster's metadata in place (``ClusterMetadata.leader_for_partition``'s two
lookups), the read-replica method called only for a partition that has a preferred
replica cached, the partition's state read only once the records and in-flight checks
have passed, and the debug line built only when debug logging is on. Every aiokafka
fetcher of the process plans with it; fetch sessions (services/worker/fetch_sessions.py)
turn its requests into session requests. aiokafka is pinned below 0.15 in pyproject.toml
for this and that.
"""

from __future__ import annotations

import collections
import logging
import random
from typing import Any

from aiokafka.consumer import fetcher as aiokafka_fetcher
from aiokafka.consumer.fetcher import Fetcher
from aiokafka.protocol.fetch import FetchRequest

_log = aiokafka_fetcher.log
"""aiokafka's fetcher logger: its debug lines stay where they were."""


def plan_actions(self: Any, assignment: Any) -> Any:
    """``Fetcher._get_actions_per_node`` (aiokafka 0.14), faster; see the module's text."""
    fetchable: collections.defaultdict[int, list[Any]] = collections.defaultdict(list)
    awaiting_reset: collections.defaultdict[int, list[Any]] = collections.defaultdict(list)
    backoff_by_nodes: collections.defaultdict[int, list[float]] = collections.defaultdict(list)
    resume_futures = []
    invalid_metadata = False
    records = self._records
    in_flight = self._in_flight
    preferred = self._preferred_read_replica
    cluster = self._client.cluster
    leaders = cluster._partitions
    state_value = assignment.state_value
    debug = _log.isEnabledFor(logging.DEBUG)

    for tp in assignment.tps:
        if preferred and tp in preferred:
            node_id = self._select_read_replica(tp)
        else:
            partitions = leaders.get(tp.topic)
            meta = None if partitions is None else partitions.get(tp.partition)
            node_id = None if meta is None else meta.leader
        if tp in records:
            # Records not yet taken: wait for the user (bounded by the backoff) before this
            # node's next fetch.
            backoff = records[tp].calculate_backoff()
            if backoff:
                backoff_by_nodes[node_id].append(backoff)
        elif node_id in in_flight:
            continue
        elif node_id is None or node_id == -1:
            if debug:
                _log.debug("No leader found for partition %s. Waiting metadata update", tp)
            invalid_metadata = True
        else:
            tp_state = state_value(tp)
            if not tp_state.has_valid_position:
                # ListOffsets goes to the leader, never to a read replica (KIP-392).
                leader_id = cluster.leader_for_partition(tp)
                if leader_id is None or leader_id == -1:
                    if debug:
                        _log.debug(
                            "No leader found for partition %s while resetting offset. "
                            "Waiting metadata update",
                            tp,
                        )
                    invalid_metadata = True
                else:
                    awaiting_reset[leader_id].append(tp)
            elif tp_state.paused:
                resume_futures.append(tp_state.resume_fut)
            else:
                position = tp_state.position
                fetchable[node_id].append((tp, position))
                if debug:
                    _log.debug("Adding fetch request for partition %s at offset %d", tp, position)

    fetch_requests = []
    for node_id, partition_data in fetchable.items():
        if node_id in backoff_by_nodes or node_id in awaiting_reset:
            continue
        random.shuffle(partition_data)  # as aiokafka: a fairer share between partitions
        by_topics: collections.defaultdict[str, list[tuple[int, int, int]]] = (
            collections.defaultdict(list)
        )
        for tp, position in partition_data:
            by_topics[tp.topic].append((tp.partition, position, self._max_partition_fetch_bytes))
        request = FetchRequest(
            self._fetch_max_wait_ms,
            self._fetch_min_bytes,
            self._fetch_max_bytes,
            self._isolation_level,
            list(by_topics.items()),
            rack_id=self._client_rack or "",
        )
        fetch_requests.append((node_id, request))

    if backoff_by_nodes:
        backoff = min(map(max, backoff_by_nodes.values()))
    else:
        backoff = self._fetcher_timeout
    return fetch_requests, awaiting_reset, backoff, invalid_metadata, resume_futures


AIOKAFKA_PLAN = Fetcher._get_actions_per_node
"""aiokafka's own planner, as it was before :func:`use_fast_fetch_planner`."""


def use_fast_fetch_planner() -> None:
    """Every aiokafka fetcher of this process plans with :func:`plan_actions`. Fetch
    sessions, once installed, plan with it already: left as they are."""
    if not getattr(Fetcher, "_sagaline_sessions", False):
        Fetcher._get_actions_per_node = plan_actions
