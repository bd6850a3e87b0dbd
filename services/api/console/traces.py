"""The console's link from a saga to its trace (SAGALINE_TRACING, SAGALINE_TRACING_UI_URL).

The read models keep no trace id: the link is a search of Jaeger's UI for the worker's
spans tagged with the saga's id (every step of a saga carries ``sagaline.saga.id``:
services/worker/tracing.py), over the time its steps span, which lands on the trace that
holds them.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime, timedelta
from urllib.parse import urlencode

from runtime.settings import Settings

WORKER_SERVICE = "sagaline-worker"
"""The worker's service name unless OTEL_SERVICE_NAME names it otherwise."""
MARGIN = timedelta(minutes=10)


def trace_url(settings: Settings, saga_id: str, times: Sequence[datetime]) -> str | None:
    """The Jaeger UI's search for the saga's trace; None with tracing off or no UI set."""
    if not (settings.tracing and settings.tracing_ui_url):
        return None
    query: dict[str, str] = {
        "service": WORKER_SERVICE,
        "tags": json.dumps({"sagaline.saga.id": saga_id}),
    }
    if times:
        query["lookback"] = "custom"
        query["start"] = str(_micros(min(times) - MARGIN))
        query["end"] = str(_micros(max(times) + MARGIN))
    else:
        query["lookback"] = "2d"
    return f"{settings.tracing_ui_url.rstrip('/')}/search?{urlencode(query)}"


def _micros(when: datetime) -> int:
    return int(when.timestamp() * 1_000_000)
