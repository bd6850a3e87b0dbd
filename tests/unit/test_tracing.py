"""Traces through the worker without Kafka: spans per decision, W3C context in the headers of
what a decision sends, a tick's span linked to the step that set its deadline, and nothing
at all with tracing off (runtime/tracing.py, services/worker/tracing.py)."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from runtime import tracing
from sagas.contracts import ledger as lc
from sagas.contracts import orders as oc
from sagas.contracts.system import Tick
from sagas.definitions.order_saga import OrderSaga
from sagas.messages import Envelope
from sagas.participants.ledger import CapacityLedger
from services.worker.deadlines import entry_key
from services.worker.metrics import Metrics
from services.worker.runner import DictTable, Incoming, ProcessRunner
from services.worker.tracing import DEADLINE_HEADER, StepTracing, unsampled

pytestmark = pytest.mark.unit
T0 = datetime(2026, 1, 1, tzinfo=UTC)
Sent = tuple[str, bytes, bytes, tuple[tuple[str, bytes], ...] | None]


class Kafka:
    """Records what is sent, and whether it came with headers at all."""

    def __init__(self) -> None:
        self.sent: list[Sent] = []

    async def send(self, topic: str, key: bytes, value: bytes, *headers: Any) -> Any:
        assert len(headers) <= 1
        self.sent.append((topic, key, value, tuple(headers[0]) if headers else None))
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        future.set_result(None)
        return future

    def on(self, topic: str) -> list[Sent]:
        return [s for s in self.sent if s[0] == topic]


@pytest.fixture
def spans() -> Iterator[tuple[trace.Tracer, InMemorySpanExporter]]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield provider.get_tracer("test"), exporter
    provider.shutdown()


def runner(process: Any, kafka: Kafka, table: DictTable, tracer: trace.Tracer | None) -> Any:
    return ProcessRunner(
        process=process,
        table=table,
        send=kafka.send,
        topic_for=lambda channel: f"t.{channel}",
        dead_letter_topic="t.deadletter",
        metrics=Metrics(),
        clock=lambda: T0,
        tracing=None if tracer is None else StepTracing(tracer, process),
    )


def ledger() -> CapacityLedger:
    return CapacityLedger(name="inventory", entity_type="product")


def record(
    message: Any, key: str, offset: int, headers: Any = None, topic: str = "t.inventory"
) -> Incoming:
    env = Envelope.wrap(
        message,
        message_id=f"m{offset}",
        key=key,
        saga_id="o1",
        reply_to="order-saga",
        occurred_at=T0,
    )
    return Incoming(topic, 0, offset, key.encode(), env.encode(), headers=headers)


def producer_context(tracer: trace.Tracer) -> tuple[trace.SpanContext, list[tuple[str, bytes]]]:
    """A span of an upstream producer (the API's request), and the headers it sends."""
    with tracer.start_as_current_span("POST /orders") as span:
        return span.get_span_context(), tracing.inject_headers()


def by_name(exporter: InMemorySpanExporter, name: str) -> ReadableSpan:
    [span] = [s for s in exporter.get_finished_spans() if s.name == name]
    return span


def parent_of(headers: Any) -> trace.SpanContext:
    return trace.get_current_span(tracing.extract_headers(headers)).get_span_context()


def test_headers_carry_the_context_there_and_back() -> None:
    provider = TracerProvider()
    with provider.get_tracer("t").start_as_current_span("s") as span:
        headers = tracing.inject_headers()
    [(name, value)] = headers
    context = span.get_span_context()
    assert name == "traceparent"
    flags = int(context.trace_flags)
    assert value == f"00-{context.trace_id:032x}-{context.span_id:016x}-{flags:02x}".encode()
    received = parent_of(headers)
    assert (received.trace_id, received.span_id, received.is_remote) == (
        context.trace_id,
        context.span_id,
        True,
    )
    assert received.trace_flags.sampled
    assert tracing.traceparent([("other", b"x"), *headers]) == value
    assert not parent_of([("traceparent", b"garbage")]).is_valid
    assert not parent_of(None).is_valid


def test_off_unless_switched_on_and_opentelemetrys_own_switches_win() -> None:
    assert not tracing.enabled_by_environment(False, {})
    assert tracing.enabled_by_environment(True, {})
    assert not tracing.enabled_by_environment(True, {"OTEL_SDK_DISABLED": "true"})
    assert not tracing.enabled_by_environment(True, {"OTEL_TRACES_EXPORTER": "none"})
    assert tracing.configure(False, "worker") is None


async def test_off_the_runner_sends_no_header_and_makes_no_span(
    spans: tuple[trace.Tracer, InMemorySpanExporter],
) -> None:
    tracer, exporter = spans
    _, headers = producer_context(tracer)
    exporter.clear()
    kafka, table = Kafka(), DictTable()
    batch = [
        record(lc.SetCapacity(on_hand=1), "p1", 0, headers),
        record(lc.Reserve(reservation_id="o1:p1", quantity=1, ttl_seconds=60), "p1", 1, headers),
        Incoming("t.inventory", 0, 2, b"p1", b"{not json", headers=headers),
    ]
    await runner(ledger(), kafka, table, None).handle_batch(batch)
    assert len(kafka.on("t.order-saga")) == 2 and len(kafka.on("t.deadletter")) == 1
    assert all(headers is None for *_, headers in kafka.sent)
    assert exporter.get_finished_spans() == ()
    assert table[entry_key("p1", T0 + timedelta(seconds=60))] == b""


async def test_a_participants_decision_is_a_child_of_its_cause_and_what_it_sends_of_it(
    spans: tuple[trace.Tracer, InMemorySpanExporter],
) -> None:
    tracer, exporter = spans
    cause, headers = producer_context(tracer)
    kafka = Kafka()
    batch = [
        record(lc.SetCapacity(on_hand=1), "p1", 0, headers),
        record(lc.Reserve(reservation_id="o1:p1", quantity=1, ttl_seconds=60), "p1", 1, headers),
        record(lc.Reserve(reservation_id="o2:p1", quantity=1, ttl_seconds=60), "p1", 2, headers),
    ]
    await runner(ledger(), kafka, DictTable(), tracer).handle_batch(batch)
    [reserved, rejected] = sorted(
        (s for s in exporter.get_finished_spans() if s.name == "inventory ledger.Reserve"),
        key=lambda s: s.attributes["messaging.kafka.offset"],  # type: ignore[index]
    )
    assert rejected.attributes is not None
    assert rejected.attributes["sagaline.decision"] == ("ledger.ReservationRejected",)
    assert reserved.kind == SpanKind.CONSUMER
    assert reserved.parent is not None and reserved.parent.span_id == cause.span_id
    assert reserved.context.trace_id == cause.trace_id
    assert reserved.attributes is not None
    assert reserved.attributes["messaging.system"] == "kafka"
    assert reserved.attributes["messaging.destination.name"] == "t.inventory"
    assert reserved.attributes["messaging.kafka.message.key"] == "p1"
    assert reserved.attributes["messaging.kafka.offset"] == 1
    assert reserved.attributes["sagaline.entity.type"] == "product"
    assert reserved.attributes["sagaline.entity.id"] == "p1"
    spans_of = [s for s in exporter.get_finished_spans() if s.name.startswith("inventory ")]
    decided = {s.context.span_id: s.attributes["sagaline.decision"] for s in spans_of}  # type: ignore[index]
    assert sorted(decided.values()) == [
        ("ledger.CapacitySet",),
        ("ledger.ReservationRejected",),
        ("ledger.Reserved",),
    ]
    # each reply and event carries the context of the decision that made it
    for _, _, value, sent_headers in kafka.sent:
        decision = parent_of(sent_headers)
        assert decision.trace_id == cause.trace_id
        assert Envelope.decode(value).type in decided[decision.span_id]


def place_order() -> oc.PlaceOrder:
    line = oc.OrderLine(product_id="p1", quantity=1, unit_price=Decimal(1))
    return oc.PlaceOrder(customer_id="c", lines=(line,), payment=oc.PaymentDetails(method="x"))


def order_record(message: Any, offset: int, headers: Any = None) -> Incoming:
    env = Envelope.wrap(message, message_id=f"m{offset}", key="o1", saga_id="o1", occurred_at=T0)
    return Incoming("t.order-saga", 0, offset, b"o1", env.encode(), headers=headers)


async def test_a_saga_step_says_its_type_step_statuses_and_commands(
    spans: tuple[trace.Tracer, InMemorySpanExporter],
) -> None:
    tracer, exporter = spans
    cause, headers = producer_context(tracer)
    kafka = Kafka()
    await runner(OrderSaga(), kafka, DictTable(), tracer).handle_batch(
        [order_record(place_order(), 0, headers)]
    )
    step = by_name(exporter, "order-saga order.Place")
    assert step.parent is not None and step.parent.span_id == cause.span_id
    attributes = dict(step.attributes or {})
    assert attributes["sagaline.saga.type"] == "order-saga"
    assert attributes["sagaline.saga.id"] == "o1"
    assert attributes["sagaline.saga.step"] == "order.Place"
    assert attributes["sagaline.saga.status_before"] == ""
    assert attributes["sagaline.saga.status_after"] == "PENDING"
    assert attributes["sagaline.commands"] == ("ledger.Reserve",)
    [(_, _, _, reserve_headers)] = kafka.on("t.inventory")
    assert parent_of(reserve_headers).span_id == step.context.span_id


async def test_a_dead_letter_carries_the_context_of_the_step_that_gave_up(
    spans: tuple[trace.Tracer, InMemorySpanExporter],
) -> None:
    tracer, exporter = spans
    cause, headers = producer_context(tracer)
    kafka = Kafka()
    poison = Incoming("t.inventory", 0, 0, b"p1", b"{not json", headers=headers)
    await runner(ledger(), kafka, DictTable(), tracer).handle_batch([poison])
    failed = by_name(exporter, "inventory process")
    assert failed.status.status_code == StatusCode.ERROR
    assert failed.parent is not None and failed.parent.span_id == cause.span_id
    [(_, _, _, letter_headers)] = kafka.on("t.deadletter")
    assert parent_of(letter_headers).span_id == failed.context.span_id


async def test_a_tick_is_a_child_of_the_step_that_set_its_deadline_and_links_to_it(
    spans: tuple[trace.Tracer, InMemorySpanExporter],
) -> None:
    tracer, exporter = spans
    _, headers = producer_context(tracer)
    kafka, table = Kafka(), DictTable()
    r = runner(ledger(), kafka, table, tracer)
    reserve = lc.Reserve(reservation_id="o1:p1", quantity=1, ttl_seconds=60)
    await r.handle_batch(
        [record(lc.SetCapacity(on_hand=1), "p1", 0, headers), record(reserve, "p1", 1, headers)]
    )
    reserved = by_name(exporter, "inventory ledger.Reserve")
    due = T0 + timedelta(seconds=60)
    # the deadline's index entry keeps the traceparent of the step that set it
    kept = table[entry_key("p1", due)]
    assert parent_of([("traceparent", kept)]).span_id == reserved.context.span_id
    assert r.deadlines.pop_due(due) == [("p1", due)]
    r.clock = lambda: due
    tick = record(Tick(), "p1", 2, [(DEADLINE_HEADER, due.isoformat().encode())])
    await r.handle_batch([tick])
    fired = by_name(exporter, "inventory system.Tick")
    assert fired.parent is not None and fired.parent.span_id == reserved.context.span_id
    assert fired.context.trace_id == reserved.context.trace_id
    [link] = fired.links
    assert link.context.span_id == reserved.context.span_id
    assert fired.attributes is not None
    assert fired.attributes["sagaline.decision"] == ("ledger.Released",)


class Producer:
    """Stands in for the bus's aiokafka producer: keeps what ``send_and_wait`` and ``send``
    were given."""

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []

    async def send_and_wait(self, topic: str, value: bytes, **kw: Any) -> Any:
        self.calls.append({"topic": topic, "value": value, **kw})
        return type("Meta", (), {"partition": 0, "offset": len(self.calls)})()

    async def send(self, topic: str, value: bytes, **kw: Any) -> Any:
        delivered: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        delivered.set_result(await self.send_and_wait(topic, value, **kw))
        return delivered


def bus_with(monkeypatch: pytest.MonkeyPatch, tracer: trace.Tracer | None) -> Any:
    from runtime.settings import Settings
    from services.bus import CommandBus

    monkeypatch.setattr(tracing, "_configured", tracer)
    bus = CommandBus(Settings())
    bus._producer = Producer()  # type: ignore[assignment]
    return bus


async def test_a_command_sent_in_a_request_carries_the_send_span_a_child_of_the_request(
    spans: tuple[trace.Tracer, InMemorySpanExporter], monkeypatch: pytest.MonkeyPatch
) -> None:
    tracer, exporter = spans
    bus = bus_with(monkeypatch, tracer)
    command = Envelope.wrap(place_order(), message_id="m1", key="o1", saga_id="o1", occurred_at=T0)
    with tracer.start_as_current_span("POST /orders") as request:
        await bus.send("order-saga", command)
    sent = by_name(exporter, "send sagaline.order-saga")
    assert sent.kind == SpanKind.PRODUCER
    assert sent.parent is not None and sent.parent.span_id == request.get_span_context().span_id
    assert sent.attributes is not None
    assert sent.attributes["messaging.destination.name"] == "sagaline.order-saga"
    assert sent.attributes["messaging.message.id"] == "m1"
    [call] = bus._producer.calls
    assert parent_of(call["headers"]).span_id == sent.context.span_id


async def test_off_a_command_goes_without_headers(
    spans: tuple[trace.Tracer, InMemorySpanExporter], monkeypatch: pytest.MonkeyPatch
) -> None:
    tracer, exporter = spans
    bus = bus_with(monkeypatch, None)
    command = Envelope.wrap(place_order(), message_id="m1", key="o1", saga_id="o1", occurred_at=T0)
    with tracer.start_as_current_span("POST /orders"):
        await bus.send("order-saga", command)
    [call] = bus._producer.calls
    assert "headers" not in call
    assert [s.name for s in exporter.get_finished_spans()] == ["POST /orders"]


async def test_each_command_of_a_batch_carries_a_send_span_of_its_own(
    spans: tuple[trace.Tracer, InMemorySpanExporter], monkeypatch: pytest.MonkeyPatch
) -> None:
    tracer, exporter = spans
    bus = bus_with(monkeypatch, tracer)
    commands = [
        Envelope.wrap(
            place_order(), message_id=f"m{i}", key=f"o{i}", saga_id=f"o{i}", occurred_at=T0
        )
        for i in (1, 2)
    ]
    positions = await bus.send_many([("order-saga", c) for c in commands])
    assert [p.offset for p in positions] == [1, 2]
    sent = [s for s in exporter.get_finished_spans() if s.name == "send sagaline.order-saga"]
    assert [s.attributes["messaging.message.id"] for s in sent if s.attributes] == ["m1", "m2"]
    assert sent[0].context.trace_id != sent[1].context.trace_id  # each command its own trace
    for call, span in zip(bus._producer.calls, sent, strict=True):
        assert parent_of(call["headers"]).span_id == span.context.span_id


async def test_off_a_batch_goes_without_headers(monkeypatch: pytest.MonkeyPatch) -> None:
    bus = bus_with(monkeypatch, None)
    command = Envelope.wrap(place_order(), message_id="m1", key="o1", saga_id="o1", occurred_at=T0)
    await bus.send_many([("order-saga", command)])
    [call] = bus._producer.calls
    assert "headers" not in call


def test_each_event_the_projector_applies_is_a_span_in_its_own_trace_linked_to_the_batch(
    spans: tuple[trace.Tracer, InMemorySpanExporter],
) -> None:
    from readside.triage import Positioned
    from services.projector.tracing import ProjectorTracing

    tracer, exporter = spans
    cause, headers = producer_context(tracer)
    placed = oc.OrderPlaced(customer_id="c", lines=(), payment_method="card", total=Decimal(0))
    event = Envelope.wrap(
        placed,
        message_id="e1",
        key="o1",
        saga_id="o1",
        entity_type="order",
        sequence=1,
        occurred_at=T0,
    )
    read = {(3, 7): type("Record", (), {"headers": headers})()}
    with ProjectorTracing(tracer, "t.events").batch([Positioned(event, 3, 7)], read):
        pass
    batch = by_name(exporter, "projector apply")
    assert batch.parent is None  # a batch of many traces is a trace of its own
    applied = by_name(exporter, "project orders")
    assert applied.parent is not None and applied.parent.span_id == cause.span_id
    assert [link.context.span_id for link in applied.links] == [batch.context.span_id]
    assert applied.attributes is not None
    assert applied.attributes["sagaline.read_model"] == "orders"
    assert applied.attributes["sagaline.entity.id"] == "o1"
    assert applied.attributes["sagaline.event.sequence"] == 1
    assert applied.attributes["messaging.kafka.offset"] == 7
    # it spans the batch's write
    assert applied.start_time <= batch.start_time  # type: ignore[operator]
    assert applied.end_time >= batch.end_time  # type: ignore[operator]


def test_the_rebuild_is_one_span_with_a_child_per_stage_its_progress_enters(
    spans: tuple[trace.Tracer, InMemorySpanExporter],
) -> None:
    from spark_projections.progress import Progress

    tracer, exporter = spans
    with tracing.staged(None, "rebuild") as off:
        off("read")
    assert exporter.get_finished_spans() == ()
    with tracing.staged(tracer, "rebuild") as on_stage:
        progress = Progress(emit=lambda line: None, on_stage=on_stage)
        for stage in ("offsets", "read", "swap"):
            progress.enter(stage)
    root = by_name(exporter, "rebuild")
    stages = [s for s in exporter.get_finished_spans() if s.name.startswith("rebuild ")]
    assert [s.name for s in stages] == ["rebuild offsets", "rebuild read", "rebuild swap"]
    assert all(s.parent is not None and s.parent.span_id == root.context.span_id for s in stages)
    # one after the other, all within the run
    assert all(a.end_time <= b.start_time for a, b in itertools.pairwise(stages))  # type: ignore[operator]
    assert stages[-1].end_time <= root.end_time  # type: ignore[operator]


async def test_a_record_of_an_unsampled_trace_makes_no_span_and_passes_its_context_on(
    spans: tuple[trace.Tracer, InMemorySpanExporter],
) -> None:
    tracer, exporter = spans
    unsampled = b"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00"
    headers = [("traceparent", unsampled), ("tracestate", b"k=v"), ("other", b"x")]
    kafka = Kafka()
    batch = [
        record(lc.SetCapacity(on_hand=1), "p1", 0, headers),
        record(lc.Reserve(reservation_id="o1:p1", quantity=1, ttl_seconds=60), "p1", 1, headers),
    ]
    table = DictTable()
    await runner(ledger(), kafka, table, tracer).handle_batch(batch)
    assert exporter.get_finished_spans() == ()
    assert kafka.sent and all(
        h == (("traceparent", unsampled), ("tracestate", b"k=v")) for *_, h in kafka.sent
    )
    assert table[entry_key("p1", T0 + timedelta(seconds=60))] == unsampled


async def test_a_sampler_that_ignores_its_parent_still_records_an_unsampled_records_step() -> None:
    from opentelemetry.sdk.trace.sampling import ALWAYS_ON

    exporter = InMemorySpanExporter()
    provider = TracerProvider(sampler=ALWAYS_ON)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    unsampled = b"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00"
    kafka = Kafka()
    batch = [record(lc.SetCapacity(on_hand=1), "p1", 0, [("traceparent", unsampled)])]
    await runner(ledger(), kafka, DictTable(), provider.get_tracer("t")).handle_batch(batch)
    [span] = exporter.get_finished_spans()
    assert span.name == "inventory ledger.SetCapacity"
    assert all(parent_of(h).span_id == span.context.span_id for *_, h in kafka.sent)


def test_an_engines_statements_are_children_of_the_current_span_only_with_tracing_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import sqlalchemy as sa

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    untraced, traced = sa.create_engine("sqlite://"), sa.create_engine("sqlite://")
    tracing.instrument_engine(untraced)  # off: nothing listens
    monkeypatch.setattr(tracing, "_sdk_provider", provider)
    tracing.instrument_engine(traced)
    with provider.get_tracer("t").start_as_current_span("projector apply") as batch:
        for engine in (untraced, traced):
            with engine.begin() as conn:
                conn.execute(sa.text("select 1"))
    [statement] = [s for s in exporter.get_finished_spans() if s.name != "projector apply"]
    assert statement.attributes is not None
    assert statement.attributes["db.statement"] == "select 1"
    assert statement.parent is not None
    assert statement.parent.span_id == batch.get_span_context().span_id


async def test_a_new_trace_the_sampler_drops_gets_no_attributes_and_sends_its_unsampled_context(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from opentelemetry.sdk.trace.sampling import ALWAYS_OFF, ParentBased

    exporter = InMemorySpanExporter()
    provider = TracerProvider(sampler=ParentBased(ALWAYS_OFF))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    built: list[str] = []
    monkeypatch.setattr(StepTracing, "_where", lambda *a: built.append("where") or {})
    kafka = Kafka()
    tracer = provider.get_tracer("t")
    batch = [record(lc.SetCapacity(on_hand=1), "p1", 0)]  # no traceparent: a new trace
    await runner(ledger(), kafka, DictTable(), tracer).handle_batch(batch)
    assert exporter.get_finished_spans() == () and built == []
    [(name, value)] = {h for *_, hs in kafka.sent for h in hs or ()}
    assert name == "traceparent" and int(value[-2:], 16) & 1 == 0  # not sampled
    assert unsampled([(name, value)]) == ((name, value),)  # so the next hop makes no span


def test_a_commands_exit_is_recorded_on_its_run_span_and_an_exception_fails_it(
    spans: tuple[trace.Tracer, InMemorySpanExporter],
) -> None:
    tracer, exporter = spans
    with pytest.raises(SystemExit), tracing.staged(tracer, "replay") as stage:
        stage("read")
        raise SystemExit(1)
    with pytest.raises(KeyError), tracing.staged(tracer, "rebuild"):
        raise KeyError("x")
    replay, rebuild = (by_name(exporter, n) for n in ("replay", "rebuild"))
    assert replay.attributes is not None and replay.attributes["process.exit.code"] == 1
    assert replay.status.status_code == StatusCode.UNSET
    assert rebuild.status.status_code == StatusCode.ERROR
    assert by_name(exporter, "replay read").parent.span_id == replay.context.span_id  # type: ignore[union-attr]


def test_an_otlp_protocol_other_than_http_is_warned_about(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
    [exporter] = tracing._exporters("otlp")
    assert type(exporter).__name__ == "OTLPSpanExporter" and not caplog.records
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
    [_] = tracing._exporters("otlp")
    [warning] = caplog.records
    assert "http/protobuf only" in warning.getMessage()


async def test_each_debezium_change_starts_a_trace_the_correlators_command_carries(
    spans: tuple[trace.Tracer, InMemorySpanExporter],
) -> None:
    import dataclasses

    from tests.unit.test_legacy_ingest import captured, ingest

    tracer, exporter = spans
    kafka = Kafka()
    batch = captured(schemas=False)
    prefix = batch[0].topic.split(".")[0]
    edge = dataclasses.replace(ingest(kafka, DictTable(), prefix), tracer=tracer)  # type: ignore[arg-type]
    await edge.handle_batch(batch)
    commands = kafka.on("t.legacy-tx")
    assert commands
    by_id = {s.context.span_id: s for s in exporter.get_finished_spans()}
    for _, _, value, headers in commands:
        span = by_id[parent_of(headers).span_id]
        assert span.parent is None and span.name.startswith("legacy-ingest ")
        assert span.attributes is not None
        assert span.attributes["sagaline.message.type"] == Envelope.decode(value).type
    off = Kafka()
    await ingest(off, DictTable(), prefix).handle_batch(batch)  # type: ignore[arg-type]
    assert off.sent and all(headers is None for *_, headers in off.sent)
