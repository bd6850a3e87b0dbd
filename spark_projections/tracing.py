"""The rebuild as one span, each of its stages a child span (tracing on only:
:mod:`runtime.tracing`). The stages are the progress lines' (offsets, spark_start, read,
triage, stage, pause, swap...): :class:`~spark_projections.progress.Progress` calls
:meth:`Stages.enter` as it enters each."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from opentelemetry import trace
from opentelemetry.trace import Span, Status, StatusCode


class Stages:
    def __init__(self, tracer: trace.Tracer, root: Span) -> None:
        self._tracer = tracer
        self._parent = trace.set_span_in_context(root)
        self._current: Span | None = None

    def enter(self, stage: str) -> None:
        """End the stage running, start ``stage``."""
        self.close()
        self._current = self._tracer.start_span(
            f"rebuild {stage}", context=self._parent, attributes={"sagaline.rebuild.stage": stage}
        )

    def close(self) -> None:
        if self._current is not None:
            self._current.end()
            self._current = None


@contextmanager
def rebuild_span(tracer: trace.Tracer | None, topic: str) -> Iterator[Callable[[str], None] | None]:
    """The rebuild's span, current inside; yields what to call as each stage starts (None:
    tracing off, nothing is built)."""
    if tracer is None:
        yield None
        return
    attributes = {"messaging.system": "kafka", "messaging.destination.name": topic}
    with tracer.start_as_current_span("rebuild", attributes=attributes) as root:
        stages = Stages(tracer, root)
        try:
            yield stages.enter
        except BaseException as exc:
            root.set_status(Status(StatusCode.ERROR, f"{type(exc).__name__}: {exc}"[:300]))
            raise
        finally:
            stages.close()
