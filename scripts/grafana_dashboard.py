"""Write the Grafana dashboard of Sagaline to ``deploy/grafana/sagaline.json``.

Panels are written here as data, so the JSON stays consistent (one datasource variable,
no hard-coded datasource uid, a grid without overlaps). ``tests/unit/test_dashboard.py``
fails while the committed JSON is stale, and when a query names a metric no component
registers (a renamed metric breaks the test, not the dashboard at 3 a.m.).
Run it after changing a panel:  .venv/bin/python -m scripts.grafana_dashboard
A dashboard edited in Grafana's UI and exported must be ported back here.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

OUT = Path(__file__).resolve().parents[1] / "deploy" / "grafana" / "sagaline.json"
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
RATE = "[$__rate_interval]"
SAGAS = '{saga_type=~"$saga_type"}'
FAILED = "REJECTED|CANCELLED"
"""Final statuses that are failures: a confirmed order succeeded, a dropped enrollment ended
as its student asked; a rejected or cancelled saga did not get what it started for."""
WIDTH = 24


def _target(expr: str, legend: str, ref: str) -> dict[str, Any]:
    return {"datasource": DATASOURCE, "expr": expr, "legendFormat": legend, "refId": ref}


def _panel(
    title: str,
    targets: list[tuple[str, str]],
    *,
    unit: str = "short",
    kind: str = "timeseries",
    description: str = "",
    width: int = 8,
) -> dict[str, Any]:
    return {
        "type": kind,
        "title": title,
        "description": description,
        "datasource": DATASOURCE,
        "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
        "options": {"legend": {"displayMode": "table", "placement": "bottom"}}
        if kind == "timeseries"
        else {"reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False}},
        "targets": [
            _target(expr, legend, chr(ord("A") + i)) for i, (expr, legend) in enumerate(targets)
        ],
        "gridPos": {"w": width, "h": 8},
    }


def _quantiles(metric: str, by: str, selector: str = "") -> list[tuple[str, str]]:
    return [
        (
            f"histogram_quantile({q}, sum by ({by}, le) (rate({metric}_bucket{selector}{RATE})))",
            f"{{{{{by}}}}} p{round(q * 100)}",
        )
        for q in (0.5, 0.95, 0.99)
    ]


def _sections() -> list[tuple[str, list[dict[str, Any]]]]:
    return [
        (
            "Sagas",
            [
                _panel(
                    "Sagas started /s",
                    [
                        (
                            f"sum by (saga_type) (rate(sagaline_sagas_started_total{SAGAS}{RATE}))",
                            "{{saga_type}}",
                        )
                    ],
                    unit="ops",
                ),
                _panel(
                    "Sagas finished /s, by outcome",
                    [
                        (
                            "sum by (saga_type, outcome) "
                            f"(rate(sagaline_sagas_finished_total{SAGAS}{RATE}))",
                            "{{saga_type}} {{outcome}}",
                        )
                    ],
                    unit="ops",
                    description="A saga finishes at a final status; an enrollment resting in "
                    "ENROLLED or WAITLISTED has not finished.",
                ),
                _panel(
                    "Failure ratio",
                    [
                        (
                            "sum by (saga_type) (rate(sagaline_sagas_finished_total"
                            f'{{saga_type=~"$saga_type", outcome=~"{FAILED}"}}{RATE})) / '
                            "sum by (saga_type) "
                            f"(rate(sagaline_sagas_started_total{SAGAS}{RATE}))",
                            "{{saga_type}}",
                        )
                    ],
                    unit="percentunit",
                    description="Sagas ending REJECTED or CANCELLED per saga started, over "
                    "the same window.",
                ),
                _panel(
                    "Saga duration",
                    _quantiles("sagaline_saga_duration_seconds", "saga_type", SAGAS),
                    unit="s",
                    width=12,
                    description="First decision to final status.",
                ),
                _panel(
                    "Step latency",
                    _quantiles("sagaline_saga_step_seconds", "saga_type", SAGAS),
                    unit="s",
                    width=12,
                    description="A saga's previous decision to its next one that sent "
                    "something: how long it waited for each step.",
                ),
                _panel(
                    "Sagas in flight, by version",
                    [
                        (
                            f"max by (saga_type, version) (sagaline_sagas_in_flight{SAGAS})",
                            "{{saga_type}} v{{version}}",
                        ),
                        (
                            f"sum(increase(sagaline_sagas_in_flight_read_failures_total{RATE}))",
                            "failed readings",
                        ),
                    ],
                    width=24,
                    description="Instances by the version that started them, read by the API "
                    "from the saga tables at most every SAGALINE_IN_FLIGHT_REFRESH_S (every "
                    "API process reads the same: max). An older version at 0 can be deleted "
                    "(sagaline versions). Failed readings keep the last values.",
                ),
            ],
        ),
        (
            "Worker",
            [
                _panel(
                    "Records /s, by process and result",
                    [
                        (
                            f"sum by (process, result) (rate(sagaline_worker_records_total{RATE}))",
                            "{{process}} {{result}}",
                        )
                    ],
                    unit="ops",
                ),
                _panel(
                    "Dead-lettered (in range)",
                    [
                        (
                            "sum(increase(sagaline_worker_records_total"
                            '{result="dead_lettered"}[$__range]))',
                            "worker",
                        ),
                        (
                            "sum(increase(sagaline_projector_events_total"
                            '{result="dead_lettered"}[$__range]))',
                            "projector",
                        ),
                    ],
                    kind="stat",
                    description="Anything above zero: `sagaline deadletters list`.",
                ),
                _panel(
                    "Deadlines fired /s",
                    [
                        (
                            f"sum by (process) (rate(sagaline_worker_deadlines_fired_total{RATE}))",
                            "{{process}}",
                        )
                    ],
                    unit="ops",
                    description="Step timeouts and reservation expiries.",
                ),
                _panel(
                    "Worker lag, by topic and partition",
                    [
                        (
                            "max by (topic, partition) (sagaline_worker_lag_records)",
                            "{{topic}}[{{partition}}]",
                        )
                    ],
                    width=16,
                    description="End offset less the position the worker stored; growing: "
                    "a worker behind or stuck.",
                ),
                _panel(
                    "Stalled partitions",
                    [("sum(sagaline_worker_stalled_partitions)", "stalled")],
                    kind="stat",
                    description="Input partitions with records waiting that have not moved "
                    "for SAGALINE_STALL_AFTER_S; each is logged as `stalled:` by its worker.",
                ),
            ],
        ),
        (
            "Projector",
            [
                _panel(
                    "Events /s, by result",
                    [
                        (
                            f"sum by (result) (rate(sagaline_projector_events_total{RATE}))",
                            "{{result}}",
                        )
                    ],
                    unit="ops",
                ),
                _panel(
                    "Events per transaction",
                    [
                        (
                            f"sum(rate(sagaline_projector_events_total{RATE})) / "
                            f"sum(rate(sagaline_projector_batches_total{RATE}))",
                            "events per database transaction",
                        )
                    ],
                    description="A few at low rates, up to SAGALINE_PROJECTOR_BATCH_SIZE at full "
                    "load; SAGALINE_PROJECTOR_LINGER_MS gathers them below full load.",
                ),
                _panel(
                    "Projector lag, by topic and partition",
                    [
                        (
                            "max by (topic, partition) (sagaline_projector_lag_records)",
                            "{{topic}}[{{partition}}]",
                        )
                    ],
                ),
                _panel(
                    "Held events",
                    [
                        ("max(sagaline_projector_held_events)", "held behind a gap"),
                        (
                            "max(sagaline_projector_held_alerting_events)",
                            "held longer than SAGALINE_GAP_ALERT_S",
                        ),
                    ],
                    description="Held longer than the alert threshold: a gap that does not fill.",
                ),
                _panel(
                    "Sagas pruned /s",
                    [
                        (
                            f"sum(rate(sagaline_projector_pruned_sagas_total{RATE}))",
                            "pruned by the read side's retention",
                        )
                    ],
                    unit="ops",
                    description="Finished sagas whose rows the read side's retention deleted "
                    "(SAGALINE_READ_RETENTION_S).",
                ),
            ],
        ),
        (
            "API",
            [
                _panel(
                    "Requests /s, by route and status",
                    [
                        (
                            f"sum by (route, status) (rate(sagaline_api_requests_total{RATE}))",
                            "{{route}} {{status}}",
                        )
                    ],
                    unit="reqps",
                    width=12,
                ),
                _panel(
                    "API latency, by route",
                    _quantiles("sagaline_api_request_seconds", "route"),
                    unit="s",
                    width=12,
                ),
            ],
        ),
        (
            "Python processes",
            [
                _panel(
                    "Time in the garbage collector, by process",
                    [
                        (
                            f"sum by (job, instance) (rate(sagaline_gc_seconds_total{RATE}))",
                            "{{job}} {{instance}}",
                        )
                    ],
                    unit="percentunit",
                    width=12,
                    description="Share of wall time each process spent collecting garbage; "
                    "more than a few percent: raise SAGALINE_GC_THRESHOLD.",
                ),
                _panel(
                    "Collections /s, by generation",
                    [
                        (
                            f"sum by (job, generation) (rate(sagaline_gc_collections_total{RATE}))",
                            "{{job}} gen {{generation}}",
                        )
                    ],
                    unit="ops",
                    width=6,
                ),
                _panel(
                    "Collector settings in effect",
                    [
                        ("max by (job) (sagaline_gc_threshold)", "{{job}} threshold"),
                        ("max by (job) (sagaline_gc_frozen_objects)", "{{job}} frozen objects"),
                    ],
                    kind="stat",
                    width=6,
                    description="SAGALINE_GC_THRESHOLD, and the objects SAGALINE_GC_FREEZE "
                    "left out of every collection.",
                ),
            ],
        ),
        (
            "Last rebuild (Spark)",
            [
                _panel(
                    "Since the last swap",
                    [
                        (
                            "time() - max(sagaline_rebuild_last_swapped_timestamp_seconds)",
                            "since swap",
                        )
                    ],
                    unit="s",
                    kind="stat",
                    width=4,
                    description="Time since the last rebuild swapped its tables in.",
                ),
                _panel(
                    "Its duration",
                    [("max(sagaline_rebuild_last_duration_seconds)", "duration")],
                    unit="s",
                    kind="stat",
                    width=6,
                ),
                _panel(
                    "Events it read",
                    [("max(sagaline_rebuild_last_events_read)", "events")],
                    kind="stat",
                    width=6,
                ),
                _panel(
                    "Rows it wrote, by table",
                    [("max by (table) (sagaline_rebuild_last_rows)", "{{table}}")],
                    kind="bargauge",
                    width=4,
                ),
                _panel(
                    "Last attempt",
                    [('max(sagaline_rebuild_last_result{result="failed"})', "failed")],
                    kind="stat",
                    width=4,
                    description=(
                        "1 when the last rebuild attempt failed without swapping (the"
                        " rebuild_failures table says at which stage and why), 0 when it swapped."
                    ),
                ),
            ],
        ),
    ]


def _laid_out() -> list[dict[str, Any]]:
    """Rows and their panels left to right, top to bottom; ids in order."""
    panels: list[dict[str, Any]] = []
    y = 0
    for title, section in _sections():
        panels.append(
            {
                "type": "row",
                "title": title,
                "collapsed": False,
                "panels": [],
                "gridPos": {"x": 0, "y": y, "w": WIDTH, "h": 1},
            }
        )
        y += 1
        x, height = 0, 0
        for panel in section:
            w, h = panel["gridPos"]["w"], panel["gridPos"]["h"]
            if x + w > WIDTH:
                x, y, height = 0, y + height, 0
            panel["gridPos"] = {"x": x, "y": y, "w": w, "h": h}
            x, height = x + w, max(height, h)
            panels.append(panel)
        y += height
    for i, panel in enumerate(panels, 1):
        panel["id"] = i
    return panels


def dashboard() -> dict[str, Any]:
    return {
        "uid": "sagaline",
        "title": "Sagaline",
        "description": "Sagas, worker, projector, API and the last Spark rebuild. Generated by "
        "scripts/grafana_dashboard.py.",
        "tags": ["sagaline"],
        "editable": True,
        "schemaVersion": 39,
        "version": 1,
        "time": {"from": "now-1h", "to": "now"},
        "refresh": "30s",
        "timezone": "utc",
        "annotations": {"list": []},
        "templating": {
            "list": [
                {
                    "name": "datasource",
                    "label": "Data source",
                    "type": "datasource",
                    "query": "prometheus",
                    "current": {},
                    "hide": 0,
                    "refresh": 1,
                },
                {
                    "name": "saga_type",
                    "label": "Saga type",
                    "type": "query",
                    "datasource": DATASOURCE,
                    "definition": "label_values(sagaline_sagas_started_total, saga_type)",
                    "query": {
                        "query": "label_values(sagaline_sagas_started_total, saga_type)",
                        "refId": "saga_type",
                    },
                    "includeAll": True,
                    "multi": True,
                    "current": {"text": "All", "value": "$__all"},
                    "refresh": 2,
                    "hide": 0,
                },
            ]
        },
        "panels": _laid_out(),
    }


def render(board: dict[str, Any]) -> str:
    return json.dumps(board, indent=2) + "\n"


def main() -> None:
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(render(dashboard()))
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
