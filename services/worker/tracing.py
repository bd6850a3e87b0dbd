"""The spans of the worker: one per record a saga or participant decides, and the tick's.

Only built with tracing on (:mod:`runtime.tracing`); the runner holds ``None`` otherwise and
never reaches this module's code. Each decided record gets a CONSUMER span, a child of the
context its producer put in the record's headers, named ``<process> <message type>``, with
OpenTelemetry's messaging attributes (``messaging.*``) and Sagaline's (``sagaline.*``): the
saga's type, the step's status before and after and the commands it issued; a participant's
entity and decision. The span is current while the record is decided, so the records it
causes (commands, replies, events, dead letters) carry its context and every log line its
ids.

Why not ``opentelemetry-instrumentation-aiokafka``: it wraps ``AIOKafkaConsumer.getone`` and
``getmany`` and ``AIOKafkaProducer.send``. The worker's records reach its agents through
Faust's consumer and stream buffers, and are decided in batches of up to
SAGALINE_BATCH_SIZE records of many sagas (services/worker/batching.py): a span around a
``getmany`` would cover a fetch of many traces, not one saga's step, and the producer span it
adds to ``send`` would be current-context-less on the batch's publish (the batch sends once
every decision is made, after the decisions' spans ended). So the consumer side is done
here per record, and the context each record's outbound messages carry is the span of the
decision that made them, injected when it is made.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import Link, SpanKind, Status, StatusCode

from runtime.tracing import Headers, extract_headers, inject_headers
from sagas.catalog import saga_type_of
from sagas.machinery.process import Process
from sagas.machinery.step import EVENTS_CHANNEL

DEADLINE_HEADER = "sagaline-deadline"
"""A tick's header with the due time it fires for (ISO 8601), so the runner finds the
context the saga remembered with that deadline (services/worker/deadlines.py's entry)."""


@dataclass
class Step:
    """The span of one decided record, and the headers its outbound records carry."""

    span: trace.Span
    headers: list[tuple[str, bytes]]


class StepTracing:
    """Spans for one process's decisions."""

    def __init__(self, tracer: trace.Tracer, process: Process[Any]) -> None:
        self.tracer = tracer
        self.process = process.name
        self.entity_type = process.entity_type
        self.saga = saga_type_of(process.entity_type) is not None
        # The SDK's samplers that follow a sampled-out parent (the default, and every
        # parentbased_* of OTEL_TRACES_SAMPLER): a record of an unsampled trace needs no span.
        sampler = getattr(tracer, "sampler", None)
        self.follows_parent = any(c.__name__ == "ParentBased" for c in type(sampler).__mro__)

    def passed_on(self, headers: Headers | None) -> tuple[tuple[str, bytes], ...] | None:
        """:func:`unsampled`'s context, when this process's sampler follows it."""
        return unsampled(headers) if self.follows_parent else None

    @contextmanager
    def step(
        self,
        topic: str,
        partition: int,
        offset: int,
        key: bytes | None,
        headers: Headers | None,
        remembered: Context | None = None,
    ) -> Iterator[Step]:
        """A span for the record at ``topic[partition]@offset``, current inside; a tick
        (``remembered``: the context its saga kept with the deadline) is a child of the step
        that set the deadline, and links to it."""
        parent = extract_headers(headers) if remembered is None else remembered
        with self.tracer.start_as_current_span(
            f"{self.process} process",
            context=parent,
            kind=SpanKind.CONSUMER,
            links=_links(remembered),
        ) as span:
            # Attributes only for a span the sampler kept (none of the SDK's samplers reads
            # them): a record whose new trace is sampled out pays for the span alone.
            if span.is_recording():
                span.set_attributes(self._where(topic, partition, offset, key))
            yield Step(span, inject_headers())

    def _where(self, topic: str, partition: int, offset: int, key: bytes | None) -> dict[str, Any]:
        attributes: dict[str, Any] = {
            "messaging.system": "kafka",
            "messaging.operation.type": "process",
            "messaging.operation.name": "process",
            "messaging.destination.name": topic,
            "messaging.destination.partition.id": str(partition),
            "messaging.kafka.offset": offset,
            "sagaline.process": self.process,
        }
        if key is not None:
            attributes["messaging.kafka.message.key"] = key.decode(errors="replace")
        return attributes

    def describe(
        self,
        span: trace.Span,
        envelope: Any,
        before: Any,
        after: Any,
        outbound: tuple[Any, ...],
        outcome: str,
    ) -> None:
        """What the decision was: a saga's step, or a participant's decision (nothing for a
        span the sampler dropped)."""
        if not span.is_recording():
            return
        span.update_name(f"{self.process} {envelope.type}")
        commands = tuple(o.envelope.type for o in outbound if o.channel != EVENTS_CHANNEL)
        events = tuple(o.envelope.type for o in outbound if o.channel == EVENTS_CHANNEL)
        attributes: dict[str, Any] = {
            "messaging.message.id": envelope.message_id,
            "sagaline.message.type": envelope.type,
            "sagaline.outcome": outcome,
            "sagaline.commands": commands,
            "sagaline.events": events,
        }
        if envelope.saga_id is not None:
            attributes["sagaline.saga.id"] = envelope.saga_id
        if self.saga:
            attributes["sagaline.saga.type"] = self.process
            attributes["sagaline.saga.step"] = envelope.type
            attributes["sagaline.saga.status_before"] = _status(before)
            attributes["sagaline.saga.status_after"] = _status(after)
        else:
            attributes["sagaline.entity.type"] = self.entity_type
            attributes["sagaline.entity.id"] = envelope.key
            # What it decided: the facts it published about its entity (Reserved,
            # ReservationRejected, Released...) or, without any, the replies it sent.
            attributes["sagaline.decision"] = events or commands
        span.set_attributes(attributes)

    @staticmethod
    def failed(reason: str) -> None:
        """The current record was dead-lettered."""
        span = trace.get_current_span()
        span.set_status(Status(StatusCode.ERROR, reason[:300]))
        span.set_attribute("sagaline.dead_lettered", True)


_PASSED_ON = ("traceparent", "tracestate")
_TRACEPARENT_LENGTH = 55


def unsampled(headers: Headers | None) -> tuple[tuple[str, bytes], ...] | None:
    """The trace context of a record whose trace is not sampled, to pass on as it came
    (None: sampled, or none). Every hop after an unsampled one follows its parent's decision
    (the parent-based samplers), so a span there would record nothing: passing the context on
    unchanged says the same to the hops after, without making a span, a context or headers
    per record (what 99% of records cost at 1% sampling)."""
    if not headers:
        return None
    for key, value in headers:
        if key == "traceparent":
            if len(value) != _TRACEPARENT_LENGTH or value[-2:] not in (b"00", b"02"):
                return None  # sampled (flags 01 or 03), or not a W3C traceparent we read
            return tuple((k, v) for k, v in headers if k in _PASSED_ON)
    return None


def _links(remembered: Context | None) -> list[Link] | None:
    if remembered is None:
        return None
    context = trace.get_current_span(remembered).get_span_context()
    if not context.is_valid:
        return None
    return [Link(context, {"sagaline.link": "deadline set by"})]


def _status(record: Any) -> str:
    """A saga state's status ("" before its first step)."""
    if record is None:
        return ""
    status = getattr(record.state, "status", None)
    return "" if status is None else str(status)


def remembered_context(traceparent: bytes | None) -> Context | None:
    """The context of a ``traceparent`` kept with a deadline (None: none kept)."""
    if not traceparent:
        return None
    context = extract_headers([("traceparent", traceparent)])
    return context if trace.get_current_span(context).get_span_context().is_valid else None
