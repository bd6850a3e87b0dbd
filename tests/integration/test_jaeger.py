"""The trace pipe on its own: the OpenTelemetry SDK's OTLP exporter sends spans to the local
Jaeger v2 (deploy/local/jaeger.sh), and Jaeger's query API returns them as one trace with
their parent and child, their attributes and their link. What the saga traces rely on, shown
with nothing of Sagaline's in between."""

from __future__ import annotations

import uuid

import pytest
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from tests.integration.jaeger import Jaeger, Trace

pytestmark = pytest.mark.integration


def test_a_span_exported_over_otlp_comes_back_from_jaegers_query_api(jaeger: Jaeger) -> None:
    run = uuid.uuid4().hex
    service = f"sagaline-pipe-{run[:8]}"
    provider = TracerProvider(resource=Resource.create({SERVICE_NAME: service}))
    provider.add_span_processor(
        BatchSpanProcessor(OTLPSpanExporter(endpoint=f"{jaeger.otlp_endpoint}/v1/traces"))
    )
    tracer = provider.get_tracer("tests.integration.test_jaeger")
    with tracer.start_as_current_span("earlier") as earlier:
        pass
    with (
        tracer.start_as_current_span(
            "order saga step",
            attributes={"sagaline.test.run": run},
            links=[trace.Link(earlier.get_span_context())],
        ) as parent,
        tracer.start_as_current_span("ledger decision", attributes={"sagaline.entity": "p1"}),
    ):
        pass
    assert provider.force_flush(10_000)
    provider.shutdown()

    found = jaeger.wait_for_traces(
        service,
        tags={"sagaline.test.run": run},
        ready=lambda traces: len(traces) == 1 and len(traces[0].spans) == 2,
    )

    [step_trace] = found
    assert int(step_trace.trace_id, 16) == parent.get_span_context().trace_id
    _assert_parent_and_child(step_trace, service, run)
    [step] = step_trace.named("order saga step")
    assert step.links == (trace.format_span_id(earlier.get_span_context().span_id),)
    assert service in jaeger.services()


def _assert_parent_and_child(found: Trace, service: str, run: str) -> None:
    [step] = found.named("order saga step")
    [decision] = found.named("ledger decision")
    assert found.roots() == [step]
    assert decision.parent_id == step.span_id
    assert {step.service, decision.service} == {service}
    assert step.tags["sagaline.test.run"] == run
    assert decision.tags["sagaline.entity"] == "p1"
    assert step.start_us <= decision.start_us
    assert decision.start_us + decision.duration_us <= step.start_us + step.duration_us
