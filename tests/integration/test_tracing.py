"""One order is one trace, on the real stack with Jaeger (issue 33).

The API and the projector run in this process, the worker in its own; all three export to
the local Jaeger over OTLP (SAGALINE_TRACING, OpenTelemetry's variables). Jaeger's query
API must return, for an order placed over the API, one trace holding the request, every
saga step, each participant's decision, the compensations of a declined payment and the
projector's writes, each span a child of the one that caused it; and, for an order whose
payment never answers, the tick that fired its step timeout, linked to the step that set it.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import pytest
import pytest_asyncio
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from opentelemetry import trace

from runtime import tracing
from runtime.topics import DEAD_LETTERS, ORDER_SAGA
from sagas.contracts import orders as oc
from sagas.contracts.orders import FINAL_STATUSES
from sagas.messages import Envelope
from tests.integration.golden import T0
from tests.integration.harness import Stack, isolated_settings, running_stack
from tests.integration.jaeger import Jaeger, Span, Trace
from tests.integration.readside import fresh_database

pytestmark = [pytest.mark.integration, pytest.mark.asyncio(loop_scope="module")]

WORKER = "sagaline-worker"
IN_PROCESS = "sagaline-api"
"""The API's service name; the projector runs in this process too, under the same name."""


@pytest.fixture(scope="module")
def otel_env(jaeger: Jaeger) -> Iterator[None]:
    """OpenTelemetry's variables for this process and the worker it starts (inherited),
    spans exported every 200 ms; this process's tracing configured, then undone."""
    env = {
        "OTEL_EXPORTER_OTLP_ENDPOINT": jaeger.otlp_endpoint,
        "OTEL_TRACES_EXPORTER": "otlp",
        "OTEL_BSP_SCHEDULE_DELAY": "200",
    }
    saved = {name: os.environ.get(name) for name in [*env, "OTEL_SERVICE_NAME"]}
    os.environ.update(env)
    os.environ.pop("OTEL_SERVICE_NAME", None)  # each component names itself
    assert tracing.configure(True, "api") is not None
    try:
        yield
    finally:
        tracing.shutdown()  # exports what is queued
        tracing._configured = None
        tracing._sdk_provider = None
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def stack(tmp_path_factory: pytest.TempPathFactory, otel_env: None) -> AsyncIterator[Stack]:
    tmp = tmp_path_factory.mktemp("tracing")
    with fresh_database("postgresql", tmp) as url:
        settings = isolated_settings(
            tmp, database_url=url, tracing=True, step_timeout_s=3.0, log_format="json"
        )
        async with running_stack(settings, tmp, projected=True) as stack:
            yield stack


async def settled(stack: Stack, order: str, timeout: float = 60) -> str:
    """The order's final status, once its saga published it."""
    deadline = asyncio.get_running_loop().time() + timeout
    while asyncio.get_running_loop().time() < deadline:
        for e in stack.tail.events_of(f"order:{order}"):
            if e.type == "order.StatusChanged" and e.payload["status"] in FINAL_STATUSES:
                return str(e.payload["status"])
        await asyncio.sleep(0.1)
    raise AssertionError(f"order {order} did not settle")


def steps(trace: Trace, process: str, message_type: str) -> list[Span]:
    return trace.named(f"{process} {message_type}")


def the_request(trace: Trace) -> Span:
    [request] = [
        s
        for s in trace.spans
        if s.service == IN_PROCESS
        and s.tags.get("http.request.method") == "POST"
        and s.tags.get("url.path") == "/orders"
    ]
    return request


def parent(trace: Trace, span: Span) -> Span:
    assert span.parent_id is not None, f"{span.operation} has no parent"
    return trace.by_id(span.parent_id)


def declined_order_complete(order: str) -> Any:
    def ready(traces: list[Trace]) -> bool:
        if len(traces) != 1:
            return False
        [t] = traces
        names = {s.operation for s in t.spans}
        return (
            len(steps(t, "inventory", "ledger.Cancel")) == 2
            and "order-saga ledger.Released" in names
            and "payment payment.Authorize" in names
            and sum(1 for s in t.spans if s.operation == "project orders") >= 3
            and any(s.tags.get("url.path") == "/orders" for s in t.spans)
        )

    return ready


async def test_a_declined_order_is_one_trace_from_the_request_to_its_last_compensation(
    stack: Stack, jaeger: Jaeger
) -> None:
    for product in ("trace-p1", "trace-p2"):
        await stack.set_stock(product, 5)
    order = await stack.place([("trace-p1", 1), ("trace-p2", 1)], method="decline")
    assert await settled(stack, order) == "CANCELLED"
    [trace] = await asyncio.to_thread(
        jaeger.wait_for_traces,
        WORKER,
        {"sagaline.saga.id": order},
        declined_order_complete(order),
        60.0,
    )
    # One root: the API's request; every other span's parent is in the trace.
    request = the_request(trace)
    assert trace.roots() == [request]
    assert request.tags["span.kind"] == "server"
    assert (request.operation, request.tags["http.route"]) == ("POST /orders", "/orders")
    sent = parent(trace, steps(trace, "order-saga", "order.Place")[0])
    assert sent.operation.startswith("send ") and sent.tags["span.kind"] == "producer"
    assert parent(trace, sent) == request
    # Every saga step: placed, each line reserved, the payment declined, each release.
    [place] = steps(trace, "order-saga", "order.Place")
    assert place.tags["sagaline.saga.type"] == "order-saga"
    assert place.tags["sagaline.saga.status_after"] == "PENDING"
    assert place.tags["messaging.system"] == "kafka"
    reserved = steps(trace, "order-saga", "ledger.Reserved")
    assert len(reserved) == 2
    [declined] = steps(trace, "order-saga", "payment.Declined")
    assert declined.tags["sagaline.saga.status_after"] == "CANCELLED"
    # Each participant's decision, a child of the saga step that sent its command.
    reserves = steps(trace, "inventory", "ledger.Reserve")
    assert sorted(s.tags["sagaline.entity.id"] for s in reserves) == ["trace-p1", "trace-p2"]
    assert all(parent(trace, s) == place for s in reserves)
    assert all("ledger.Reserved" in str(s.tags["sagaline.decision"]) for s in reserves)
    [authorize] = steps(trace, "payment", "payment.Authorize")
    assert "payment.Declined" in str(authorize.tags["sagaline.decision"])
    assert parent(trace, declined) == authorize
    # The compensation: each reservation released, at the declined step's command.
    cancels = steps(trace, "inventory", "ledger.Cancel")
    assert all(parent(trace, s) == declined for s in cancels)
    assert all("ledger.Released" in str(s.tags["sagaline.decision"]) for s in cancels)
    # The projector's writes: each in the trace of the step that published its event.
    projected = trace.named("project orders")
    assert projected and all(s.service == IN_PROCESS for s in projected)
    publishers = {parent(trace, s).operation for s in projected}
    assert {"order-saga order.Place", "order-saga payment.Declined"} <= publishers
    assert all(s.links for s in projected)  # to the batch that wrote them


async def test_a_timed_out_orders_trace_holds_the_tick_linked_to_the_step_that_set_it(
    stack: Stack, jaeger: Jaeger
) -> None:
    await stack.set_stock("trace-p3", 5)
    order = await stack.place([("trace-p3", 1)], method="hang")  # the payment never answers
    assert await settled(stack, order) in ("CANCELLED", "REJECTED")

    def ticked(traces: list[Trace]) -> bool:
        return len(traces) == 1 and bool(steps(traces[0], "order-saga", "system.Tick"))

    [trace] = await asyncio.to_thread(
        jaeger.wait_for_traces, WORKER, {"sagaline.saga.id": order}, ticked, 60.0
    )
    tick = steps(trace, "order-saga", "system.Tick")[0]  # the first: the step timeout
    # Jaeger's v1 answer folds a parent that is also linked into one FOLLOWS_FROM reference;
    # its OTLP answer (v3) keeps both.
    parent_id, links = otlp_parent_and_links(jaeger, trace.trace_id, tick.span_id)
    set_by = trace.by_id(parent_id)
    # the step that set the step timeout: the reservation's reply, which sent Authorize
    assert set_by.operation == "order-saga ledger.Reserved"
    assert links == [set_by.span_id]
    assert tick.links == (set_by.span_id,)
    # no other span without its parent (the tick's shows only in the OTLP answer)
    assert {r.span_id for r in trace.roots()} == {the_request(trace).span_id, tick.span_id}
    # what the tick decided (the payment voided, the stock released) is in the trace too
    voids = steps(trace, "payment", "payment.Void")
    assert voids and parent(trace, voids[0]) == tick
    assert any(parent(trace, s) == tick for s in steps(trace, "inventory", "ledger.Cancel"))


async def test_a_dead_letter_its_log_line_and_its_span_share_the_trace_of_its_cause(
    stack: Stack, jaeger: Jaeger
) -> None:
    settings = stack.settings
    cancel = Envelope.wrap(
        oc.CancelOrder(), message_id="m-poison", key="poison-1", saga_id="poison-1", occurred_at=T0
    )
    poison = json.dumps({**json.loads(cancel.encode()), "type": "order.Teleport"}).encode()
    tracer = tracing.active()
    assert tracer is not None
    with tracer.start_as_current_span("a caller") as caller:
        headers = tracing.inject_headers()
    await produce(settings, settings.topic(ORDER_SAGA), b"poison-1", poison, headers)
    cause = caller.get_span_context()
    # the worker's JSON line about it names the span it was decided in
    line = await logged(stack, "m-poison")
    assert line["trace_id"] == f"{cause.trace_id:032x}" and "dead-lettering" in line["message"]
    # the letter carries that span's context
    letter_headers = await first_record_headers(settings, settings.topic(DEAD_LETTERS))
    letter_parent = tracing.extract_headers(letter_headers)
    context = trace.get_current_span(letter_parent).get_span_context()
    assert (f"{context.trace_id:032x}", f"{context.span_id:016x}") == (
        line["trace_id"],
        line["span_id"],
    )

    # and Jaeger has the span, failed, a child of the caller's
    def has_step(traces: list[Trace]) -> bool:
        return any(s.span_id == line["span_id"] for t in traces for s in t.spans)

    # Jaeger keeps an hour of earlier runs' letters too: the one of this trace
    found = next(
        t
        for t in await asyncio.to_thread(
            jaeger.wait_for_traces, WORKER, {"sagaline.dead_lettered": "true"}, has_step, 60.0
        )
        if t.trace_id == line["trace_id"]
    )
    step = found.by_id(line["span_id"])
    assert step.tags.get("error") is True or step.tags.get("otel.status_code") == "ERROR"
    assert step.parent_id == f"{cause.span_id:016x}"


async def produce(
    settings: Any, topic: str, key: bytes, value: bytes, headers: list[tuple[str, bytes]]
) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=settings.kafka_bootstrap)
    await producer.start()
    try:
        await producer.send_and_wait(topic, value, key=key, headers=headers)
    finally:
        await producer.stop()


async def logged(stack: Stack, message_id: str, timeout: float = 60) -> dict[str, Any]:
    """The worker's JSON log line about ``message_id``."""
    deadline = asyncio.get_running_loop().time() + timeout
    while asyncio.get_running_loop().time() < deadline:
        for text in stack.worker.tail_log(10**7).splitlines():
            if text.startswith("{") and (line := json.loads(text)).get("message_id") == message_id:
                return dict(line)
        await asyncio.sleep(0.3)
    raise AssertionError(f"no log line about {message_id}: {stack.worker.tail_log()}")


async def first_record_headers(settings: Any, topic: str) -> list[tuple[str, bytes]]:
    consumer = AIOKafkaConsumer(
        topic, bootstrap_servers=settings.kafka_bootstrap, auto_offset_reset="earliest"
    )
    await consumer.start()
    try:
        record = await asyncio.wait_for(consumer.getone(), 30)
        return list(record.headers)
    finally:
        await consumer.stop()


def otlp_parent_and_links(jaeger: Jaeger, trace_id: str, span_id: str) -> tuple[str, list[str]]:
    """A span's parent and links as Jaeger's OTLP query API (/api/v3) returns them."""
    response = httpx.get(f"{jaeger.query_url}/api/v3/traces/{trace_id}", timeout=10)
    response.raise_for_status()
    for resource in response.json()["result"]["resourceSpans"]:
        for scope in resource["scopeSpans"]:
            for span in scope["spans"]:
                if span["spanId"] == span_id:
                    return span["parentSpanId"], [link["spanId"] for link in span["links"]]
    raise AssertionError(f"span {span_id} is not in trace {trace_id}")
