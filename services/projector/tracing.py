"""The projector's spans (tracing on only: :mod:`runtime.tracing`).

A batch is one transaction over the events of many sagas, so it is a span of its own (its
SQL statements are its children, through opentelemetry-instrumentation-sqlalchemy), and
each event it applied is a span in the event's own trace: a child of the context its
publisher put in the record's headers, spanning the batch's write, linked to the batch.
That is OpenTelemetry's pattern for batch processing (a batch span with links), and puts
every read-model write of an order into the order's trace.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from opentelemetry import trace
from opentelemetry.trace import Link, SpanKind

from readside.triage import Positioned
from runtime.tracing import extract_headers
from sagas.catalog import model_for


class ProjectorTracing:
    def __init__(self, tracer: trace.Tracer, topic: str) -> None:
        self.tracer = tracer
        self.topic = topic

    @contextmanager
    def batch(self, events: Sequence[Positioned], read: Mapping[Any, Any]) -> Iterator[None]:
        """The batch's span, current while it is written; then a span per event applied."""
        started = time.time_ns()
        with self.tracer.start_as_current_span(
            "projector apply",
            kind=SpanKind.CONSUMER,
            attributes={
                "messaging.system": "kafka",
                "messaging.operation.type": "process",
                "messaging.destination.name": self.topic,
                "messaging.batch.message_count": len(events),
            },
        ) as span:
            yield
        ended = time.time_ns()
        link = [Link(span.get_span_context(), {"sagaline.link": "written in batch"})]
        for positioned in events:
            record = read.get((positioned.partition, positioned.offset))
            self._event(positioned, getattr(record, "headers", None), link, started, ended)

    def _event(
        self,
        positioned: Positioned,
        headers: Any,
        links: list[Link],
        started: int,
        ended: int,
    ) -> None:
        event = positioned.event
        entity_type = event.entity_type or ""
        model = model_for(entity_type)
        name = model.name if model is not None else entity_type
        attributes: dict[str, Any] = {
            "messaging.system": "kafka",
            "messaging.operation.type": "process",
            "messaging.destination.name": self.topic,
            "messaging.destination.partition.id": str(positioned.partition),
            "messaging.kafka.offset": positioned.offset,
            "messaging.kafka.message.key": event.key,
            "messaging.message.id": event.message_id,
            "sagaline.read_model": name,
            "sagaline.entity.type": entity_type,
            "sagaline.entity.id": event.key,
            "sagaline.event.type": event.type,
        }
        if event.sequence is not None:
            attributes["sagaline.event.sequence"] = event.sequence
        if event.saga_id is not None:
            attributes["sagaline.saga.id"] = event.saga_id
        span = self.tracer.start_span(
            f"project {name}",
            context=extract_headers(headers),
            kind=SpanKind.CONSUMER,
            attributes=attributes,
            links=links,
            start_time=started,
        )
        span.end(end_time=ended)
