"""Incremental fetch sessions (Kafka's KIP-227) for aiokafka's fetcher: on unless
``SAGALINE_FETCH_SESSIONS`` is false.

aiokafka sends every fetch without a session: each request lists every fetchable partition
of the node with its offset, and each response lists them all back, records or not. A worker
holds one partition per process topic and partition count (64 with the defaults), so a batch
of one record below full load pays for encoding, sending, the broker's reading and decoding
of 64 partitions (BENCHMARKS.md, issue 27: 83 us to encode, 135 us to decode, measured apart).
With a session the broker keeps the set of partitions and their fetch offsets: a request
lists only what changed since the last one (a partition whose offset moved, one added) and
the partitions to drop; a response lists only the partitions with records or news.

The session is the client's side of that protocol, per broker, kept only from what the
broker acknowledged: after each answered request it holds exactly the partitions and offsets
the broker's session holds, so the response's partitions are always among those the fetcher
asked for (aiokafka reads each one's fetch offset from the request). Anything unexpected (a
session error, a request that failed or was cancelled, a broker too old for fetch v7) drops
it, and the next request is a full one that opens a new session. Nothing else changes: which
partitions are fetchable, and every position, stay aiokafka's.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from aiokafka.consumer.fetcher import Fetcher
from aiokafka.protocol.fetch import FetchRequest
from aiokafka.structs import TopicPartition

from services.worker.fetch_planner import plan_actions

INITIAL_EPOCH = 0
"""A request with this epoch (and session id 0) is full and asks for a new session."""
MAX_EPOCH = 2**31 - 1
SESSIONS_FROM_VERSION = 7
"""Fetch v7 brought the session fields."""

Wanted = Mapping[TopicPartition, tuple[int, int]]
"""What a fetch asks for: each partition's fetch offset and maximum bytes."""


@dataclass
class FetchSession:
    """One broker's fetch session, as the broker last acknowledged it."""

    id: int = 0
    epoch: int = INITIAL_EPOCH
    partitions: dict[TopicPartition, int] = field(default_factory=dict)
    """Each partition in the broker's session, with the fetch offset it holds."""

    def request(self, full: FetchRequest) -> SessionFetchRequest:
        """``full`` (aiokafka's request of every fetchable partition) as this session's
        next request: all of it when no session is open, else what changed."""
        wanted = {
            TopicPartition(topic, partition): (offset, max_bytes)
            for topic, partitions in full.topics
            for partition, offset, max_bytes in partitions
        }
        if self.id == 0:
            return SessionFetchRequest(full, self, wanted, 0, INITIAL_EPOCH, wanted, [])
        changed = {tp: v for tp, v in wanted.items() if self.partitions.get(tp) != v[0]}
        forgotten = [tp for tp in self.partitions if tp not in wanted]
        return SessionFetchRequest(full, self, wanted, self.id, self.epoch, changed, forgotten)

    def answered(self, request: SessionFetchRequest, response: Any) -> None:
        """The broker answered ``request``: the session as the broker now holds it."""
        if response.API_VERSION < SESSIONS_FROM_VERSION or response.error_code != 0:
            self.drop()
            return
        if request.epoch == INITIAL_EPOCH:
            self.id = response.session_id
        if self.id == 0:  # the broker kept no session (its cache full): full requests again
            self.drop()
            return
        self.epoch = 1 if request.epoch in (INITIAL_EPOCH, MAX_EPOCH) else request.epoch + 1
        self.partitions = {tp: offset for tp, (offset, _) in request.wanted.items()}

    def drop(self) -> None:
        """Forget the session: the next request is full and opens a new one (the broker
        evicts the old one from its cache in time)."""
        self.id, self.epoch, self.partitions = 0, INITIAL_EPOCH, {}


class SessionFetchRequest(FetchRequest):  # type: ignore[misc]
    """A fetch in a session: it sends ``changed`` and ``forgotten``, and reads as the full
    request it stands for (``topics``: every wanted partition with its offset, which
    aiokafka matches each response partition against)."""

    def __init__(
        self,
        full: FetchRequest,
        session: FetchSession,
        wanted: Wanted,
        session_id: int,
        epoch: int,
        changed: Wanted,
        forgotten: list[TopicPartition],
    ) -> None:
        super().__init__(
            full._max_wait_ms,
            full._min_bytes,
            full._max_bytes,
            full._isolation_level,
            _by_topic(changed),
            rack_id=full._rack_id,
        )
        self.full = full
        self.session = session
        self.wanted = wanted
        self.session_id = session_id
        self.epoch = epoch
        self.forgotten = forgotten

    @property
    def topics(self) -> list[tuple[str, list[tuple[int, int, int]]]]:
        topics: list[tuple[str, list[tuple[int, int, int]]]] = self.full.topics
        return topics

    def build(self, request_struct_class: Any) -> Any:
        if request_struct_class.API_VERSION < SESSIONS_FROM_VERSION:
            return self.full.build(request_struct_class)  # answered() drops the session
        struct = super().build(request_struct_class)
        forgotten: defaultdict[str, list[int]] = defaultdict(list)
        for tp in self.forgotten:
            forgotten[tp.topic].append(tp.partition)
        # The fields aiokafka sets to "no session" (id 0, epoch -1, nothing forgotten).
        struct.__dict__["session_id"] = self.session_id
        struct.__dict__["session_epoch"] = self.epoch
        struct.__dict__["forgotten_topics_data"] = list(forgotten.items())
        return struct


def _by_topic(partitions: Wanted) -> list[tuple[str, list[tuple[int, int, int]]]]:
    topics: defaultdict[str, list[tuple[int, int, int]]] = defaultdict(list)
    for tp, (offset, max_bytes) in partitions.items():
        topics[tp.topic].append((tp.partition, offset, max_bytes))
    return list(topics.items())


def use_fetch_sessions() -> None:
    """Make every aiokafka fetcher of this process fetch in sessions (Faust's consumer, and
    the short-lived ones that read a record or two at a rebalance, each fetcher its own
    sessions): each fetch request aiokafka builds is turned into its broker's session
    request, and the fetcher's client tells the session each answer."""
    if getattr(Fetcher, "_sagaline_sessions", False):
        return

    def get_actions_per_node(self: Any, assignment: Any) -> Any:
        actions = plan_actions(self, assignment)  # aiokafka's plan, faster (fetch_planner.py)
        if "_sessions" not in self.__dict__:
            self._sessions = defaultdict(FetchSession)
            _tell_sessions(self._client)
        requests: list[tuple[int, Any]] = actions[0]
        requests[:] = [(node, self._sessions[node].request(r)) for node, r in requests]
        return actions

    Fetcher._get_actions_per_node = get_actions_per_node
    Fetcher._sagaline_sessions = True


def _tell_sessions(client: Any) -> None:
    """Wrap ``client.send`` (the consumer's own client) so a session request's answer, or
    its failure, reaches its session."""
    send = client.send

    async def send_and_tell(node_id: int, request: Any, **kwargs: Any) -> Any:
        if not isinstance(request, SessionFetchRequest):
            return await send(node_id, request, **kwargs)
        try:
            response = await send(node_id, request, **kwargs)
        except BaseException:
            request.session.drop()  # sent or not, answered or not: start again in full
            raise
        request.session.answered(request, response)
        return response

    client.send = send_and_tell
