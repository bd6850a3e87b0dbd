"""OpenTelemetry traces for Sagaline's processes, off unless ``SAGALINE_TRACING`` is on.

On, :func:`configure` installs the SDK's tracer provider with a batch span processor and an
exporter, each configured by OpenTelemetry's own environment variables, read by the SDK
(nothing here re-implements them):

- ``OTEL_TRACES_EXPORTER``: ``otlp`` (the default: OTLP over HTTP/protobuf), ``console``
  or ``none``;
- ``OTEL_EXPORTER_OTLP_ENDPOINT`` / ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``, ``..._HEADERS``,
  ``..._TIMEOUT``... (default ``http://localhost:4318``);
- ``OTEL_TRACES_SAMPLER`` / ``OTEL_TRACES_SAMPLER_ARG`` (default ``parentbased_always_on``:
  a record whose producer sampled its trace is traced, a new trace always);
- ``OTEL_SERVICE_NAME`` and ``OTEL_RESOURCE_ATTRIBUTES`` (the service name defaults to the
  component's: ``sagaline-worker``, ``sagaline-api``...); ``OTEL_BSP_*`` for the batching;
- ``OTEL_SDK_DISABLED=true`` turns it off whatever ``SAGALINE_TRACING`` says.

Off, :func:`configure` returns None and installs nothing: the components keep a ``None``
tracer and take their untraced paths, which build no header, span nor context (the check is
one ``is None`` per batch or request; BENCHMARKS.md measures it).

Context crosses Kafka as W3C ``traceparent``/``tracestate`` record headers, through
OpenTelemetry's propagators API with a getter and setter for Kafka's list of
``(key, bytes)`` headers (:func:`inject_headers`, :func:`extract_headers`).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from opentelemetry import propagate, trace
from opentelemetry.context import Context
from opentelemetry.propagators.textmap import Getter, Setter

log = logging.getLogger(__name__)

Headers = Sequence[tuple[str, bytes]]
"""Kafka record headers as aiokafka and Faust give and take them."""

TRACEPARENT = "traceparent"

_configured: trace.Tracer | None = None
_sdk_provider: trace.TracerProvider | None = None


class _KafkaGetter(Getter[Headers]):
    def get(self, carrier: Headers, key: str) -> list[str] | None:
        found = [v.decode("latin-1") for k, v in carrier if k == key and v is not None]
        return found or None

    def keys(self, carrier: Headers) -> list[str]:
        return [k for k, _ in carrier]


class _KafkaSetter(Setter[list[tuple[str, bytes]]]):
    def set(self, carrier: list[tuple[str, bytes]], key: str, value: str) -> None:
        carrier.append((key, value.encode("latin-1")))


GETTER = _KafkaGetter()
SETTER = _KafkaSetter()


def inject_headers(context: Context | None = None) -> list[tuple[str, bytes]]:
    """The headers that carry ``context`` (default: the current one) to a record's consumer."""
    headers: list[tuple[str, bytes]] = []
    propagate.inject(headers, context=context, setter=SETTER)
    return headers


def extract_headers(headers: Headers | None) -> Context:
    """The context a record's producer sent (an empty one: none, or not readable)."""
    return propagate.extract(headers or (), getter=GETTER, context=Context())


def traceparent(headers: Headers | None) -> bytes | None:
    """The record's ``traceparent`` header, as sent."""
    for key, value in headers or ():
        if key == TRACEPARENT:
            return value
    return None


def enabled_by_environment(switch: bool, environ: dict[str, str] | None = None) -> bool:
    """Whether ``switch`` (SAGALINE_TRACING) stands: OpenTelemetry's own off switches win."""
    env = os.environ if environ is None else environ
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    return switch and env.get("OTEL_TRACES_EXPORTER", "otlp").strip().lower() != "none"


def configure(switch: bool, component: str) -> trace.Tracer | None:
    """Install the SDK for this process (once) and return Sagaline's tracer; None when
    tracing is off, which is what the components check."""
    global _configured, _sdk_provider
    if not enabled_by_environment(switch):
        return None
    if _configured is None:
        provider = _provider(f"sagaline-{component}")
        # Global too, for what reads the global one; Sagaline's own code and the
        # instrumentations it sets up are given this one (a global set before wins).
        trace.set_tracer_provider(provider)
        _sdk_provider = provider
        _configured = provider.get_tracer("sagaline")
        log.info(
            "tracing on: %s spans of service %s",
            os.environ.get("OTEL_TRACES_EXPORTER", "otlp"),
            provider.resource.attributes.get("service.name"),
        )
    return _configured


def _provider(service_name: str) -> Any:
    # The SDK is imported only when tracing is on: a process with it off never loads it.
    from opentelemetry.sdk.resources import SERVICE_NAME, Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    # Resource.create reads OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES; without a name
    # there, the component's. TracerProvider reads OTEL_TRACES_SAMPLER(_ARG).
    resource = Resource.create()
    if str(resource.attributes.get(SERVICE_NAME, "")).startswith("unknown_service"):
        resource = resource.merge(Resource({SERVICE_NAME: service_name}))
    provider = TracerProvider(resource=resource)
    for exporter in _exporters(os.environ.get("OTEL_TRACES_EXPORTER", "otlp")):
        provider.add_span_processor(BatchSpanProcessor(exporter))
    return provider


def _exporters(names: str) -> Iterable[Any]:
    for name in (n.strip().lower() for n in names.split(",")):
        if name == "otlp":
            # The exporter reads OTEL_EXPORTER_OTLP_(TRACES_)ENDPOINT, _HEADERS, _TIMEOUT...
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

            _warn_unless_http()
            yield OTLPSpanExporter()
        elif name == "console":
            from opentelemetry.sdk.trace.export import ConsoleSpanExporter

            yield ConsoleSpanExporter()
        elif name not in ("", "none"):
            log.warning("OTEL_TRACES_EXPORTER %r is not one Sagaline knows (otlp, console)", name)


def _warn_unless_http() -> None:
    """Only OTLP over HTTP/protobuf is installed (one exporter, no gRPC stack to carry): a
    collector asked for by another protocol gets a line saying so, not silence."""
    protocol = os.environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or os.environ.get(
        "OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"
    )
    if protocol.strip().lower() != "http/protobuf":
        log.warning(
            "OTEL_EXPORTER_OTLP_PROTOCOL %r: Sagaline exports OTLP over http/protobuf only "
            "(the collector's HTTP port, 4318 by default)",
            protocol,
        )


def active() -> trace.Tracer | None:
    """Sagaline's tracer when :func:`configure` turned tracing on in this process, else None."""
    return _configured


def provider() -> trace.TracerProvider | None:
    """The tracer provider :func:`configure` installed (None: tracing is off)."""
    return _sdk_provider


@contextmanager
def sending(
    tracer: trace.Tracer, topic: str, key: str, message_id: str | None = None
) -> Iterator[list[tuple[str, bytes]]]:
    """A PRODUCER span for a record sent to ``topic`` from outside the worker (the API, the
    CLI, a re-drive), current inside; yields the headers that carry it."""
    attributes: dict[str, Any] = {
        "messaging.system": "kafka",
        "messaging.operation.type": "send",
        "messaging.operation.name": "send",
        "messaging.destination.name": topic,
        "messaging.kafka.message.key": key,
    }
    if message_id is not None:
        attributes["messaging.message.id"] = message_id
    with tracer.start_as_current_span(
        f"send {topic}", kind=trace.SpanKind.PRODUCER, attributes=attributes
    ):
        yield inject_headers()


class _Stages:
    """The child spans of a staged run, one after the other."""

    def __init__(self, tracer: trace.Tracer, root: trace.Span, name: str) -> None:
        self._tracer = tracer
        self._parent = trace.set_span_in_context(root)
        self._name = name
        self._current: trace.Span | None = None

    def enter(self, stage: str) -> None:
        """End the stage running, start ``stage``."""
        self.close()
        self._current = self._tracer.start_span(
            f"{self._name} {stage}",
            context=self._parent,
            attributes={f"sagaline.{self._name}.stage": stage},
        )

    def close(self) -> None:
        if self._current is not None:
            self._current.end()
            self._current = None


@contextmanager
def staged(
    tracer: trace.Tracer | None, name: str, attributes: dict[str, Any] | None = None
) -> Iterator[Callable[[str], None]]:
    """A run (the rebuild, a replay) as one span ``name``, current inside; yields what to
    call as each of its stages starts, each stage a child span ``<name> <stage>``. With
    ``tracer`` None (tracing off) it builds nothing and the call does nothing."""
    if tracer is None:
        yield _no_stage
        return
    with tracer.start_as_current_span(name, attributes=attributes) as root:
        stages = _Stages(tracer, root, name)
        try:
            yield stages.enter
        except SystemExit as exc:  # a command's exit (a replay's 1 says it diverged)
            root.set_attribute("process.exit.code", exc.code if isinstance(exc.code, int) else 1)
            raise
        except BaseException as exc:
            root.set_status(trace.Status(trace.StatusCode.ERROR, f"{type(exc).__name__}"))
            raise
        finally:
            stages.close()


def _no_stage(stage: str) -> None:
    """Tracing off: a stage is nothing to record."""


def instrument_engine(engine: Any) -> None:
    """SQL spans (opentelemetry-instrumentation-sqlalchemy) of ``engine``'s statements, as
    children of the span current when each runs; nothing with tracing off."""
    if _sdk_provider is None:
        return
    # The package's engine tracer (its event listeners, on this engine only), not its
    # instrumentor: the instrumentor refuses SQLAlchemy 2.1 (it declares < 2.1) and wraps
    # create_async_engine, whose import needs greenlet; it also instruments once per
    # process, and the tests run the API's engine and the projector's in one.
    from opentelemetry.instrumentation.sqlalchemy.engine import EngineTracer
    from opentelemetry.metrics import NoOpMeter

    tracer = _sdk_provider.get_tracer("opentelemetry.instrumentation.sqlalchemy")
    usage = NoOpMeter("sagaline").create_up_down_counter("db.client.connections.usage")
    EngineTracer(tracer, engine, usage)  # type: ignore[no-untyped-call]


def shutdown() -> None:
    """Export the spans still queued (a stopping process would lose its last batch)."""
    flush = getattr(_sdk_provider, "shutdown", None)
    if flush is not None:
        flush()
