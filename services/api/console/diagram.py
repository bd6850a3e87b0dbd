"""A saga definition drawn from its one declaration (the saga kit's ``FLOWS``, ``PORTS``,
``LEGS`` and ``STATUSES``), as inline SVG with the live count of instances at each step.

Nothing here names a saga, a step or a participant: each box, arrow and line is read off
the definition, so the picture cannot drift from the code. A flow is a row of its steps,
left to right, ending in its ``done`` status; under it, what a failure before the pivot
sends (the legs the flow gives back, :attr:`Flow.compensated`) and the status it settles
in. Pure: the counts and the links are given (the console's route reads them).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from markupsafe import Markup, escape

from sagas.machinery.kit import Flow, Saga, Step
from sagas.machinery.legs import Port

CHAR_W, LINE_H, PAD, GAP, BADGE_W = 6.6, 15, 10, 34, 64
"""Monospace text at 11 px: a character's width; a line's height; padding; the gap an
arrow crosses; the count's badge."""


@dataclass(frozen=True)
class Box:
    """One drawn box: its lines (the first is its title) and where it links to."""

    lines: tuple[str, ...]
    link: str | None = None
    count: int | None = None
    """The live count shown on it (None: no badge)."""
    cls: str = "step"

    @property
    def width(self) -> float:
        longest = max(len(line) for line in self.lines)
        return longest * CHAR_W + 2 * PAD + (BADGE_W if self.count is not None else 0)

    @property
    def height(self) -> float:
        return len(self.lines) * LINE_H + 2 * PAD


def participants(saga: Saga[Any]) -> dict[str, str]:
    """Port name -> the channel of the participant behind it (the definition's attribute)."""
    return {port: str(getattr(saga, port)) for port in saga.PORTS}


def _seconds(value: Any) -> str:
    if isinstance(value, timedelta):
        return f"{value.total_seconds():g} s"
    return str(value)


def _answers(port: Port, action: str) -> tuple[type[Any], ...]:
    match action:
        case "hold":
            return (port.held, *port.also, port.refused)
        case "confirm":
            return (port.confirmed, port.confirm_refused)
    return (port.released,)


def _command(port: Port, action: str) -> str:
    """The command type an action sends, as a suffix."""
    match action:
        case "confirm":
            return f": {port.confirm('r').TYPE}"
        case "release":
            return f": {port.release('r').TYPE}"
    return ""  # its payload is the saga's own (``hold``), its type too


def step_lines(saga: Saga[Any], index: int, step: Step) -> tuple[str, ...]:
    """What a step's box says: status, each action on each leg at which participant, the
    answers it waits for, the timeout and what a timeout does."""
    channels = participants(saga)
    lines = [f"{index + 1}. {step.status}" + ("  (pivot: forward only)" if step.forward else "")]
    waits: list[str] = []
    for action, field in step.acts:
        port_name = saga.LEGS[field]
        port = saga.PORTS[port_name]
        lines.append(f"{action} {field} @ {channels[port_name]}{_command(port, action)}")
        waits += [a.TYPE for a in _answers(port, action) if a.TYPE not in waits]
    lines.append("waits for " + " | ".join(waits))
    then = "asks again" if step.forward else "compensates"
    lines.append(f"timeout {_seconds(saga.step_timeout)}: {then}")
    return tuple(lines)


def failure_lines(saga: Saga[Any], flow: Flow) -> tuple[str, ...]:
    """A failure before the pivot (a refusal, an expiry, a timeout, a cancel): the releases
    it sends, in order, and the status it settles in."""
    channels = participants(saga)
    lines = [f"failure before the pivot -> {flow.failed}"]
    ports = [saga.PORTS[saga.LEGS[f]] for f in flow.compensated]
    refusals = dict.fromkeys(t.TYPE for p in ports for t in (p.refused, p.confirm_refused))
    expiries = dict.fromkeys(p.released.TYPE for p in ports)
    lines.append(f"on a refusal ({' | '.join(refusals)}),")
    lines.append(f"an expiry ({' | '.join(expiries)}) or a step's timeout")
    for field, status in (flow.refused or {}).items():
        lines.append(f"a refused hold of {field} -> {status}")
    for field in flow.compensated:
        port_name = saga.LEGS[field]
        lines.append(
            f"compensate: release {field} @ {channels[port_name]}"
            f"{_command(saga.PORTS[port_name], 'release')}"
        )
    if not flow.compensated:
        lines.append("nothing to compensate")
    return tuple(lines)


def status_kind(saga: Saga[Any], status: str) -> str:
    s = saga.STATUSES
    kinds = [
        k
        for k, among in (("final", s.final), ("settled", s.settled - s.final), ("failed", s.failed))
        if status in among
    ]
    return ", ".join(kinds) or "in flight"


def draw(
    saga: Saga[Any],
    counts: Mapping[str, int],
    link: Callable[[str], str],
) -> Markup:
    """The definition of ``saga`` as an SVG: per flow its steps (count of instances at each
    step's status from ``counts``; a status several steps share is counted on its first
    step only, and the others say so), its done status and its failure; every status box
    links to ``link(status)`` (the saga list filtered to it)."""
    rows: list[tuple[str, list[Box], Box]] = []
    counted: set[str] = set()
    for name, flow in saga.FLOWS.items():
        boxes = []
        for i, step in enumerate(flow.steps):
            lines = step_lines(saga, i, step)
            if step.status in counted:
                boxes.append(Box((*lines, f"(counted above: {step.status} is shared)"),
                                 link(step.status)))  # fmt: skip
                continue
            counted.add(step.status)
            boxes.append(Box(lines, link(step.status), counts.get(step.status, 0)))
        for wait in sorted(flow.waits - counted):
            counted.add(wait)
            box = Box((wait, "rests here while a hold waits", "no step deadline runs"), link(wait),
                      counts.get(wait, 0), "wait")  # fmt: skip
            boxes.append(box)
        done = f"{flow.done} ({status_kind(saga, flow.done)})"
        boxes.append(Box((f"done -> {flow.done}", done), link(flow.done), cls="done"))
        rows.append((name, boxes, Box(failure_lines(saga, flow), link(flow.failed), cls="fail")))
    return _svg(saga, rows)


def _svg(saga: Saga[Any], rows: list[tuple[str, list[Box], Box]]) -> Markup:
    """Each flow a column of its steps, top to bottom, its failure beside the steps before
    the pivot (a dashed arrow from each); flows one under the other."""
    body: list[str] = []
    y: float = PAD + LINE_H
    width = 0.0
    for (name, boxes, failure), flow in zip(rows, saga.FLOWS.values(), strict=True):
        body.append(_text(PAD, y, f"flow {name}", "flow"))
        y += LINE_H / 2
        column = max(b.width for b in boxes)
        side = PAD + column + 2 * GAP
        top = y
        for i, box in enumerate(boxes):
            body.append(_box(PAD, y, box))
            if i < len(flow.steps) and not flow.steps[i].forward:
                mid = y + box.height / 2
                body.append(
                    f'<line class="failure" x1="{PAD + box.width:.0f}" y1="{mid:.0f}" '
                    f'x2="{side - 4:.0f}" y2="{top + failure.height / 2:.0f}" '
                    'marker-end="url(#head)"/>'
                )
            y += box.height
            if i + 1 < len(boxes):
                body.append(
                    f'<line class="arrow" x1="{PAD + 30}" y1="{y:.0f}" x2="{PAD + 30}" '
                    f'y2="{y + GAP - 4:.0f}" marker-end="url(#head)"/>'
                )
                y += GAP
        body.append(_box(side, top, failure))
        width = max(width, side + failure.width + PAD)
        y = max(y, top + failure.height) + GAP
    legend = [f"{s}: {status_kind(saga, s)}" for s in saga.STATUSES.statuses]
    channels = participants(saga)
    notes = (
        "statuses: " + "; ".join(legend),
        "participants: " + ", ".join(f"{p} -> channel {c}" for p, c in channels.items()),
        "count: instances whose status is the step's now (read model); a status shared by "
        "several steps is counted once.",
    )
    for note in notes:
        body.append(_text(PAD, y, note, "note"))
        width = max(width, PAD + len(note) * CHAR_W + PAD)
        y += LINE_H
    height = y + PAD
    title = f"The {saga.entity_type} saga ({saga.name}), drawn from its declaration"
    desc = f"{len(saga.FLOWS)} flow(s): " + "; ".join(
        f"{n}: " + " -> ".join(s.status for s in f.steps) + f" -> {f.done}"
        for n, f in saga.FLOWS.items()
    )
    defs = (
        '<defs><marker id="head" viewBox="0 0 8 8" refX="7" refY="4" markerWidth="8" '
        'markerHeight="8" orient="auto"><path d="M0,0 L8,4 L0,8 z" class="head"/></marker></defs>'
    )
    return Markup(
        f'<svg class="definition" viewBox="0 0 {width:.0f} {height:.0f}" width="{width:.0f}" '
        f'height="{height:.0f}" font-family="monospace" font-size="11" role="img" '
        'aria-labelledby="def-t def-d" '
        f'xmlns="http://www.w3.org/2000/svg"><title id="def-t">{escape(title)}</title>'
        f'<desc id="def-d">{escape(desc)}</desc>{defs}' + "".join(body) + "</svg>"
    )


def _text(x: float, y: float, text: str, cls: str) -> str:
    return f'<text class="{cls}" x="{x:.0f}" y="{y:.0f}">{escape(text)}</text>'


def _box(x: float, y: float, box: Box) -> str:
    parts = [
        f'<rect class="{box.cls}" x="{x:.0f}" y="{y:.0f}" width="{box.width:.0f}" '
        f'height="{box.height:.0f}" rx="6"/>'
    ]
    for i, line in enumerate(box.lines):
        cls = "title" if i == 0 else "line"
        parts.append(_text(x + PAD, y + PAD + (i + 0.8) * LINE_H, line, cls))
    if box.count is not None:
        bx = x + box.width - BADGE_W - PAD / 2
        parts.append(
            f'<rect class="badge" x="{bx:.0f}" y="{y + PAD / 2:.0f}" width="{BADGE_W}" '
            f'height="{LINE_H + 6}" rx="9"/>'
        )
        parts.append(_text(bx + 8, y + PAD / 2 + LINE_H, f"{box.count} now", "count"))
    inner = "".join(parts)
    if box.link is None:
        return f"<g>{inner}</g>"
    return f'<a href="{escape(box.link)}">{inner}</a>'
