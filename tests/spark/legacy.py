"""A legacy CDC history for the rebuild's tests, played by the real pure definitions.

The captured Debezium records (``tests/fixtures/debezium``, both converter shapes) go
through what the worker's ingest edge sends for them (:mod:`sagas.legacy_ingest`) into the
correlator, with ``SAGALINE_CDC_DRIVES_ENROLLMENT`` on: its business events (``legacy.*``
under ``legacy:tx:<id>``), the ``legacy-domain`` process's facts (``legacy-student:<id>``)
and the enrollment domain's facts they cause (the legacy course and student upserted, an
enrollment saga started and dropped) are what the worker would publish. No read model folds
the ``legacy.*`` events; they must be applied as known events (never dead-lettered as
unknown) by both the projector and the rebuild, and the enrollment models they feed must
come out equal.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from pathlib import Path

from runtime.settings import Settings
from sagaline.wiring import build_processes
from sagas.catalog import LEGACY_TX
from sagas.legacy_ingest import change_envelope, marker_envelope
from sagas.messages import Envelope
from tests.unit.helpers import Bus

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "debezium"
T0 = datetime.fromisoformat("2024-03-05T08:00:00+00:00")
WINDOW = timedelta(seconds=10)


def legacy_history(schemas: bool = False) -> list[Envelope]:
    """The events the worker publishes for the captured legacy actions, in order."""
    # The processes as the worker builds them (every stage of the correlator included).
    settings = Settings(
        cdc_enabled=True, cdc_drives_enrollment=True, cdc_window_s=WINDOW.total_seconds()
    )
    bus = Bus.of(*build_processes(settings))
    path = FIXTURES / f"schemas-{'true' if schemas else 'false'}.jsonl"
    now = T0
    for line in path.read_text().splitlines():
        record = json.loads(line)
        now += timedelta(seconds=1)
        value = None if record["value"] is None else record["value"].encode()
        if record["topic"].endswith(".transaction"):
            env = marker_envelope(value, now)
        else:
            env = change_envelope(value)
        if env is not None:
            bus.send(LEGACY_TX, env, now)
        bus.tick(now)
    for _ in range(4):  # every window (and any later stage's hold) closed
        now += WINDOW + timedelta(seconds=1)
        bus.tick(now)
    return list(bus.published)
