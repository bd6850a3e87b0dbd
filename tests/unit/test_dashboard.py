"""The Grafana dashboard queries only metrics the components register, and is current."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
import yaml

from scripts.grafana_dashboard import OUT, dashboard, render
from services.api.metrics import ApiPrometheus
from services.projector.prometheus import ProjectorPrometheus
from services.worker.prometheus import WorkerPrometheus

pytestmark = pytest.mark.unit

_SUFFIXES = {
    "counter": ("_total", "_created"),
    "gauge": ("",),
    "histogram": ("_bucket", "_sum", "_count", "_created"),
    "summary": ("", "_sum", "_count", "_created"),
}
_KEYWORDS = frozenset(
    {"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "offset"}
    | {"and", "or", "unless", "inf", "nan"}
)


def registered() -> set[str]:
    """Every series name the worker, the projector and the API expose, by family type (a
    labelled family has no samples until a child exists, so samples would miss it)."""
    names = set()
    for registry in (
        WorkerPrometheus().registry,
        ProjectorPrometheus().registry,
        ApiPrometheus().registry,
    ):
        for family in registry.collect():
            names.update(family.name + suffix for suffix in _SUFFIXES[family.type])
    return names


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects: what remains once strings, label
    matchers, ranges, grouping clauses, function calls and keywords are taken out."""
    expr = re.sub(r'"(?:[^"\\]|\\.)*"', "", expr)
    expr = re.sub(r"\{[^}]*\}|\[[^\]]*\]", " ", expr)
    expr = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", expr)
    found = re.finditer(r"(?<![\w$.])([a-zA-Z_:][a-zA-Z0-9_:]*)\b(\s*\()?", expr)
    return {m.group(1) for m in found if not m.group(2) and m.group(1).lower() not in _KEYWORDS}


def targets(board: dict[str, Any]) -> list[tuple[str, str]]:
    return [
        (panel["title"], target["expr"])
        for panel in board["panels"]
        for target in panel.get("targets", [])
    ]


def test_the_parser_finds_metric_names_and_nothing_else() -> None:
    expr = (
        "histogram_quantile(0.95, sum by (route, le) "
        '(rate(sagaline_api_request_seconds_bucket{route=~"$r", status!="5.."}[$__rate_interval])))'
        " / on (route) group_left sum(x_total offset 5m) and time() - up"
    )
    assert metric_names(expr) == {"sagaline_api_request_seconds_bucket", "x_total", "up"}


def test_every_query_names_only_registered_metrics() -> None:
    known = registered()
    unknown = {
        (title, name)
        for title, expr in targets(dashboard())
        for name in metric_names(expr)
        if name not in known
    }
    assert unknown == set(), "a panel queries a metric nothing registers (renamed?)"


def test_a_renamed_metric_fails_the_check() -> None:
    known = registered()
    assert "sagaline_worker_lag_records" in known
    assert not metric_names("max(sagaline_worker_lagging_records)") <= known


def test_every_registered_metric_has_a_panel() -> None:
    queried = {name for _, expr in targets(dashboard()) for name in metric_names(expr)}
    families = {re.sub(r"_(total|bucket|sum|count|created)$", "", n) for n in queried}
    missing = {
        n
        for n in registered()
        if re.sub(r"_(total|bucket|sum|count|created)$", "", n) not in families
    }
    assert missing == set(), "a metric no panel shows"


def test_no_datasource_is_hard_coded() -> None:
    board = dashboard()
    sources = [
        node
        for panel in board["panels"]
        for node in [
            panel.get("datasource"),
            *(t.get("datasource") for t in panel.get("targets", [])),
        ]
        if node is not None
    ]
    assert sources and all(s == {"type": "prometheus", "uid": "${datasource}"} for s in sources)
    variables = {v["name"]: v for v in board["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"


def test_panels_do_not_overlap_and_ids_are_unique() -> None:
    panels = dashboard()["panels"]
    assert len({p["id"] for p in panels}) == len(panels)
    cells: set[tuple[int, int]] = set()
    for p in panels:
        g = p["gridPos"]
        assert g["x"] + g["w"] <= 24
        mine = {
            (x, y) for x in range(g["x"], g["x"] + g["w"]) for y in range(g["y"], g["y"] + g["h"])
        }
        assert not mine & cells, p["title"]
        cells |= mine


def test_the_committed_dashboard_is_current() -> None:
    assert OUT.read_text() == render(dashboard()), "run `python -m scripts.grafana_dashboard`"
    assert json.loads(OUT.read_text())["uid"] == "sagaline"


def test_the_provisioning_points_at_the_dashboard_and_a_prometheus() -> None:
    provisioning = OUT.parent / "provisioning"
    boards = yaml.safe_load((provisioning / "dashboards" / "sagaline.yml").read_text())
    sources = yaml.safe_load((provisioning / "datasources" / "prometheus.yml").read_text())
    assert boards["providers"][0]["options"]["path"] == "/var/lib/grafana/dashboards"
    assert sources["datasources"][0]["type"] == "prometheus"
