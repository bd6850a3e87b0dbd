"""Jaeger for tests: the local Jaeger v2 (``deploy/local/jaeger.sh``) and its query API.

The conftest's ``jaeger`` fixture starts Jaeger for the session (CI runs ``make test``, which
starts it; a bare ``pytest`` starts it here) and stops it afterwards, unless it ran already
(someone's own, left running). A Jaeger that cannot start, or cannot be built, fails the test
with the script's output; it never skips it.

Spans reach the query API a moment after they were exported (the collector batches them),
so :meth:`Jaeger.wait_for_traces` asks again until the traces it was asked for are there and
``ready`` says they are complete (every span of a saga has arrived), or its time is up.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from spark_projections.session import REPO_ROOT

JAEGER_SH = REPO_ROOT / "deploy/local/jaeger.sh"

START_TIMEOUT_S = 1800.0
"""A start on a machine that never built Jaeger builds it first (about 6 minutes on 2 cores;
the script waits up to 20 minutes for another caller's build)."""


@dataclass(frozen=True)
class Span:
    """One span as Jaeger's query API returns it, with what a test asserts on."""

    trace_id: str
    span_id: str
    operation: str
    service: str
    parent_id: str | None
    """The span this one is a child of (its CHILD_OF reference), None for a root."""
    links: tuple[str, ...]
    """Span ids this one links to or follows from (its FOLLOWS_FROM references; OTLP span
    links become these)."""
    tags: Mapping[str, Any]
    start_us: int
    duration_us: int


@dataclass(frozen=True)
class Trace:
    trace_id: str
    spans: tuple[Span, ...]

    def named(self, operation: str) -> list[Span]:
        return [s for s in self.spans if s.operation == operation]

    def by_id(self, span_id: str) -> Span:
        return next(s for s in self.spans if s.span_id == span_id)

    def roots(self) -> list[Span]:
        """Spans with no parent in this trace (a parent never exported counts as none)."""
        ids = {s.span_id for s in self.spans}
        return [s for s in self.spans if s.parent_id not in ids]


@dataclass(frozen=True)
class Jaeger:
    query_url: str
    """The UI and its HTTP query API, e.g. http://127.0.0.1:16686."""
    otlp_endpoint: str
    """The OTLP/HTTP receiver's base URL (OTEL_EXPORTER_OTLP_ENDPOINT); traces go to
    ``<it>/v1/traces``."""
    otlp_grpc_endpoint: str
    """The OTLP/gRPC receiver, host:port."""

    def otel_env(self, service: str, sampler_ratio: float = 1.0) -> dict[str, str]:
        """OpenTelemetry's standard variables that send a process's traces here."""
        return {
            "OTEL_SERVICE_NAME": service,
            "OTEL_EXPORTER_OTLP_ENDPOINT": self.otlp_endpoint,
            "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf",
            "OTEL_TRACES_EXPORTER": "otlp",
            "OTEL_TRACES_SAMPLER": "parentbased_traceidratio",
            "OTEL_TRACES_SAMPLER_ARG": str(sampler_ratio),
        }

    def services(self) -> list[str]:
        response = httpx.get(f"{self.query_url}/api/services", timeout=10)
        response.raise_for_status()
        return list(response.json()["data"] or [])

    def traces(
        self, service: str, tags: Mapping[str, str] | None = None, limit: int = 100
    ) -> list[Trace]:
        """The traces holding a span of ``service`` whose tags include ``tags`` (Jaeger
        matches a trace by one span that has them all), newest first, in the last hour."""
        params: dict[str, str | int] = {"service": service, "limit": limit, "lookback": "1h"}
        if tags:
            params["tags"] = json.dumps(dict(tags))
        response = httpx.get(f"{self.query_url}/api/traces", params=params, timeout=10)
        if response.status_code == 404:  # Jaeger knows no span of that service yet
            return []
        response.raise_for_status()
        return [_trace(t) for t in response.json()["data"] or []]

    def trace(self, trace_id: str) -> Trace | None:
        response = httpx.get(f"{self.query_url}/api/traces/{trace_id}", timeout=10)
        if response.status_code == 404:
            return None
        response.raise_for_status()
        found = response.json()["data"] or []
        return _trace(found[0]) if found else None

    def wait_for_traces(
        self,
        service: str,
        tags: Mapping[str, str] | None = None,
        ready: Callable[[list[Trace]], bool] = bool,
        timeout: float = 30.0,
    ) -> list[Trace]:
        """:meth:`traces`, asked again every half second until ``ready`` holds for what
        came back (by default: at least one trace) or ``timeout`` passed; then it fails the
        test with what was found. Each trace is read whole (by its id): a search's answer
        can hold spans of it that arrived by then."""
        deadline = time.monotonic() + timeout
        found: list[Trace] = []
        while True:
            found = [self.trace(t.trace_id) or t for t in self.traces(service, tags)]
            if ready(found) or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        if not ready(found):
            pytest.fail(
                f"Jaeger ({self.query_url}) had no complete trace of {service!r} with tags "
                f"{dict(tags or {})} after {timeout:.0f} s; found: {_describe(found)}",
                pytrace=False,
            )
        return found


def _trace(data: Mapping[str, Any]) -> Trace:
    processes = data.get("processes") or {}
    spans = []
    for raw in data["spans"]:
        refs = raw.get("references") or []
        parent = next((r["spanID"] for r in refs if r["refType"] == "CHILD_OF"), None)
        links = tuple(r["spanID"] for r in refs if r["refType"] == "FOLLOWS_FROM")
        spans.append(
            Span(
                trace_id=raw["traceID"],
                span_id=raw["spanID"],
                operation=raw["operationName"],
                service=processes.get(raw.get("processID"), {}).get("serviceName", ""),
                parent_id=parent,
                links=links,
                tags={t["key"]: t["value"] for t in raw.get("tags") or []},
                start_us=int(raw["startTime"]),
                duration_us=int(raw["duration"]),
            )
        )
    spans.sort(key=lambda s: s.start_us)
    return Trace(trace_id=data["traceID"], spans=tuple(spans))


def _describe(traces: list[Trace]) -> str:
    if not traces:
        return "nothing"
    return "; ".join(
        f"{t.trace_id}: " + ", ".join(f"{s.service}/{s.operation}" for s in t.spans) for t in traces
    )


def _jaeger_sh(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(JAEGER_SH), *args], capture_output=True, text=True, timeout=timeout, check=False
    )


def jaeger_up() -> Iterator[Jaeger]:
    """Jaeger for as long as the caller holds it; the conftest's ``jaeger``."""
    ran_before = _jaeger_sh("status").returncode == 0
    up = _jaeger_sh("start", timeout=START_TIMEOUT_S)
    if up.returncode != 0:
        pytest.fail(
            f"Jaeger did not start (deploy/local/jaeger.sh start):\n{up.stderr}", pytrace=False
        )
    try:
        yield Jaeger(
            query_url=_jaeger_sh("url").stdout.strip(),
            otlp_endpoint=_jaeger_sh("otlp").stdout.strip(),
            otlp_grpc_endpoint=_jaeger_sh("otlp-grpc").stdout.strip(),
        )
    finally:
        if not ran_before:
            _jaeger_sh("stop")
