"""The console's charts, drawn on the server as inline SVG: no script, no library, nothing
the Content-Security-Policy would have to allow (presentation is attributes and the
console's own style sheet). Every text drawn is escaped; every chart has a ``<title>`` and
a ``<desc>`` saying in words what it shows, and the numbers are in a table beside it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from markupsafe import Markup, escape

from services.api.console.data import Step
from services.api.saga_list import Bucket

SERIES = ("s0", "s1", "s2", "s3")
"""Colour classes (console.css) of the series of a chart, in order."""


def _fmt(value: float) -> str:
    return f"{value:.1f}".rstrip("0").rstrip(".")


def _svg(width: int, height: int, title: str, desc: str, body: list[str], cls: str) -> Markup:
    return Markup(
        f'<svg class="chart {cls}" viewBox="0 0 {width} {height}" width="{width}" '
        f'role="img" aria-labelledby="{cls}-t {cls}-d" xmlns="http://www.w3.org/2000/svg">'
        f'<title id="{cls}-t">{escape(title)}</title><desc id="{cls}-d">{escape(desc)}</desc>'
        + "".join(body)
        + "</svg>"
    )


def _clock(at: datetime) -> str:
    return at.strftime("%H:%M")


def _nice(top: float) -> float:
    """A round axis maximum at or above ``top``."""
    if top <= 0:
        return 1
    step = 1.0
    while step * 10 <= top:
        step *= 10
    for m in (1, 2, 5, 10):
        if m * step >= top:
            return m * step
    return 10 * step


W, H, LEFT, BOTTOM, TOP = 560, 180, 48, 24, 12


def throughput(buckets: Sequence[Bucket], types: Sequence[str]) -> Markup:
    """Stacked bars: per bucket, the sagas of each type that reached a settled status."""
    totals = [sum(b.settled.values()) for b in buckets]
    top = _nice(max(totals, default=0))
    plot_w, plot_h = W - LEFT - 8, H - BOTTOM - TOP
    slot = plot_w / max(len(buckets), 1)
    body = _axes(top, plot_h, "sagas")
    for i, b in enumerate(buckets):
        y: float = TOP + plot_h
        for j, kind in enumerate(types):
            n = b.settled.get(kind, 0)
            if not n:
                continue
            h = plot_h * n / top
            y -= h
            body.append(
                f'<rect class="bar {SERIES[j % len(SERIES)]}" x="{_fmt(LEFT + i * slot + 2)}" '
                f'y="{_fmt(y)}" width="{_fmt(slot - 4)}" height="{_fmt(h)}">'
                f"<title>{escape(kind)}: {n} settled from {_clock(b.start)}</title></rect>"
            )
    body += _times(buckets, slot)
    body += _legend(types)
    total = sum(totals)
    desc = (
        f"{total} saga(s) reached a settled status in the last hour, per "
        f"{len(buckets)} intervals; the busiest interval had {max(totals, default=0)}."
    )
    return _svg(W, H, "Throughput: sagas settled per interval", desc, body, "throughput")


def latency(buckets: Sequence[Bucket]) -> Markup:
    """Two lines: the median and the 95th percentile of start-to-settled time."""
    values = [v for b in buckets for v in (b.p50_ms, b.p95_ms) if v is not None]
    top = _nice(max(values, default=0))
    plot_w, plot_h = W - LEFT - 8, H - BOTTOM - TOP
    slot = plot_w / max(len(buckets), 1)
    body = _axes(top, plot_h, "ms")
    # p95 first, larger, then p50 on top: where both are one value (one saga) both show.
    for j, (name, pick) in reversed(list(enumerate((("p50", 0), ("p95", 1))))):
        points = []
        for i, b in enumerate(buckets):
            v = (b.p50_ms, b.p95_ms)[pick]
            if v is None:
                continue
            x, y = LEFT + (i + 0.5) * slot, TOP + plot_h * (1 - v / top)
            points.append((x, y, v, b.start))
        if len(points) > 1:
            path = " ".join(f"{_fmt(x)},{_fmt(y)}" for x, y, _v, _s in points)
            body.append(f'<polyline class="line {SERIES[j]}" points="{path}"/>')
        for x, y, v, start in points:
            body.append(
                f'<circle class="dot {SERIES[j]}" cx="{_fmt(x)}" cy="{_fmt(y)}" r="{3 + 2 * j}">'
                f"<title>{name} {v:.0f} ms from {_clock(start)}</title></circle>"
            )
    body += _times(buckets, slot)
    body += _legend(["p50", "p95"])
    worst = max((b.p95_ms for b in buckets if b.p95_ms is not None), default=None)
    desc = (
        "No saga settled in the last hour."
        if worst is None
        else f"Start to settled status per interval; the worst p95 was {worst:.0f} ms."
    )
    return _svg(W, H, "Latency: median and p95, start to settled", desc, body, "latency")


def _axes(top: float, plot_h: float, unit: str) -> list[str]:
    out = []
    for frac in (0, 0.5, 1):
        y = TOP + plot_h * (1 - frac)
        out.append(f'<line class="grid" x1="{LEFT}" x2="{W - 8}" y1="{_fmt(y)}" y2="{_fmt(y)}"/>')
        out.append(
            f'<text class="axis" x="{LEFT - 4}" y="{_fmt(y + 4)}" text-anchor="end">'
            f"{_fmt(top * frac)}</text>"
        )
    out.append(f'<text class="axis" x="4" y="{TOP - 2}">{escape(unit)}</text>')
    return out


def _times(buckets: Sequence[Bucket], slot: float) -> list[str]:
    out = []
    for i, b in enumerate(buckets):
        if i % 3 == 0:
            out.append(
                f'<text class="axis" x="{_fmt(LEFT + i * slot)}" y="{H - 6}">'
                f"{_clock(b.start)}</text>"
            )
    return out


def _legend(names: Sequence[str]) -> list[str]:
    out = []
    x = W - 8 - 90 * len(names)
    for j, name in enumerate(names):
        out.append(
            f'<rect class="bar {SERIES[j % len(SERIES)]}" x="{x + 90 * j}" y="2" '
            f'width="10" height="10"/><text class="axis" x="{x + 90 * j + 14}" y="11">'
            f"{escape(name)}</text>"
        )
    return out


# --- a saga's swimlanes ----------------------------------------------------------------


@dataclass(frozen=True)
class Lane:
    name: str
    """The entity type (``order``, ``product``, ``payment``...)."""
    entities: list[str]
    """The entity ids of that type the saga touched, in first-touch order."""


def lanes(steps: Sequence[Step], saga_type: str | None) -> list[Lane]:
    """One lane per entity type the saga touched: its own type first, then in the order
    first touched."""
    order: dict[str, list[str]] = {}
    if saga_type is not None:
        order[saga_type] = []
    for step in steps:
        kind, _, ident = step.entity_key.partition(":")
        ids = order.setdefault(kind, [])
        if ident not in ids:
            ids.append(ident)
    return [Lane(k, v) for k, v in order.items()]


LANE_H, LABEL_W, MAX_W = 44, 120, 1100


def swimlanes(steps: Sequence[Step], saga_type: str | None) -> Markup:
    """The saga's steps in time order, one column each, in the lane of the entity that
    recorded them; consecutive steps joined; a compensation drawn as a diamond (class
    ``compensation``) where every other step is a circle."""
    rows = lanes(steps, saga_type)
    index = {lane.name: i for i, lane in enumerate(rows)}
    n = max(len(steps), 1)
    col = max(8.0, min(64.0, (MAX_W - LABEL_W) / n))
    width = int(LABEL_W + col * n + 16)
    height = LANE_H * len(rows) + 28
    body: list[str] = []
    for i, lane in enumerate(rows):
        top = i * LANE_H
        body.append(
            f'<g class="lane" data-lane="{escape(lane.name)}">'
            f'<rect class="lane-bg{" alt" if i % 2 else ""}" x="0" y="{top}" width="{width}" '
            f'height="{LANE_H}"/><text class="lane-name" x="8" y="{top + 20}">'
            f"{escape(lane.name)}</text>"
            f'<text class="axis" x="8" y="{top + 36}">{_entities(lane)}</text></g>'
        )
    previous: tuple[float, float] | None = None
    marks: list[str] = []
    links: list[str] = []
    for k, step in enumerate(steps):
        row = index[step.entity_key.partition(":")[0]]
        x, y = LABEL_W + col * (k + 0.5), row * LANE_H + LANE_H / 2
        if previous is not None:
            links.append(
                f'<line class="link" x1="{_fmt(previous[0])}" y1="{_fmt(previous[1])}" '
                f'x2="{_fmt(x)}" y2="{_fmt(y)}"/>'
            )
        previous = (x, y)
        tip = escape(
            f"#{k + 1} {step.event_type} on {step.entity_key}: {step.summary} "
            f"({step.at:%H:%M:%S.%f}"[:-3]
            + " UTC)"
        )
        if step.compensation:
            r = 8
            marks.append(
                f'<polygon class="mark compensation" points="{_fmt(x)},{_fmt(y - r)} '
                f'{_fmt(x + r)},{_fmt(y)} {_fmt(x)},{_fmt(y + r)} {_fmt(x - r)},{_fmt(y)}">'
                f"<title>Compensation: {tip}</title></polygon>"
            )
        else:
            marks.append(
                f'<circle class="mark step" cx="{_fmt(x)}" cy="{_fmt(y)}" r="6">'
                f"<title>{tip}</title></circle>"
            )
        if col >= 28:
            marks.append(
                f'<text class="axis" x="{_fmt(x)}" y="{height - 14}" text-anchor="middle">'
                f"{k + 1}</text>"
            )
    body += links + marks
    compensations = sum(1 for s in steps if s.compensation)
    body.append(
        f'<text class="axis" x="8" y="{height - 4}">steps in time order, left to right; '
        "◆ compensation</text>"
    )
    desc = (
        f"{len(steps)} step(s) across {len(rows)} participant(s): "
        f"{', '.join(lane.name for lane in rows)}; {compensations} compensation(s)."
    )
    return _svg(width, height, "The saga's steps per participant", desc, body, "swimlanes")


def _entities(lane: Lane) -> str:
    shown = ", ".join(lane.entities[:2])
    more = f" +{len(lane.entities) - 2}" if len(lane.entities) > 2 else ""
    return str(escape(shown[:18] + ("…" if len(shown) > 18 else "") + more))
