"""What a replay found, summed up: how many keys were replayed and decided identically, the
diverging ones grouped by channel, status and kind of difference (each group with its first
example, recorded and replayed side by side), the keys not replayable and why, and how many
would have ended in another status. As text for people, as JSON for tools."""

from __future__ import annotations

import json
import re
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from sagas.machinery.replay import Compared, Replay
from sagas.machinery.replay_compare import Sent

WIDTH = 64
"""Characters per column of a side-by-side example."""


@dataclass
class Group:
    channel: str
    status: str
    kind: str
    keys: list[str] = field(default_factory=list)
    example: tuple[str, Compared] | None = None


@dataclass
class Summary:
    replayed: int
    identical: int
    decisions: int
    groups: list[Group]
    not_replayable: dict[str, str]
    """``channel/key`` -> why."""
    ended: dict[str, int] | None
    """``channel: before -> after`` -> how many keys (None: no baseline to compare with)."""
    ended_keys: dict[str, list[str]]
    unattributed: int
    dead_lettered: int = 0
    """Inputs the worker dead-lettered: applied by neither run, not compared."""
    deadlines_otherwise: int = 0
    """Keys whose candidate set its deadlines otherwise than the baseline (not a divergence
    by itself: one that fired, or no longer fired, diverges where it did)."""
    notes: list[str] = field(default_factory=list)

    @property
    def diverging(self) -> int:
        return sum(len(g.keys) for g in self.groups)

    def to_json(self) -> dict[str, Any]:
        return {
            "replayed": self.replayed,
            "identical": self.identical,
            "diverging": self.diverging,
            "decisions": self.decisions,
            "groups": [
                {
                    "channel": g.channel,
                    "status": g.status,
                    "kind": g.kind,
                    "count": len(g.keys),
                    "keys": g.keys,
                    "example": None if g.example is None else _example_json(*g.example),
                }
                for g in self.groups
            ],
            "not_replayable": self.not_replayable,
            "ended_differently": self.ended,
            "ended_differently_keys": self.ended_keys,
            "unattributed_deadline_decisions": self.unattributed,
            "dead_lettered_inputs": self.dead_lettered,
            "deadlines_set_otherwise": self.deadlines_otherwise,
            "notes": self.notes,
        }


def summarize(replay: Replay, compared_with_baseline: bool) -> Summary:
    groups: dict[tuple[str, str, str], Group] = {}
    refused: dict[str, str] = {}
    ended: Counter[str] = Counter()
    ended_keys: dict[str, list[str]] = defaultdict(list)
    replayed = identical = 0
    for key in replay.keys:
        if key.not_replayable is not None:
            refused[f"{key.channel}/{key.key}"] = key.not_replayable
            continue
        replayed += 1
        if key.status_before != key.status_after:
            change = f"{key.channel}: {key.status_before} -> {key.status_after}"
            ended[change] += 1
            ended_keys[change].append(key.key)
        first = key.first
        if first is None:
            identical += 1
            continue
        slot = (key.channel, first.status, first.kind)
        group = groups.setdefault(slot, Group(*slot))
        group.keys.append(key.key)
        group.example = group.example or (key.key, first)
    ordered = sorted(groups.values(), key=lambda g: (-len(g.keys), g.channel, g.status, g.kind))
    return Summary(
        replayed=replayed,
        identical=identical,
        decisions=sum(k.decisions for k in replay.keys),
        groups=ordered,
        not_replayable=refused,
        ended=dict(ended) if compared_with_baseline else None,
        ended_keys=dict(ended_keys) if compared_with_baseline else {},
        unattributed=replay.unattributed,
        dead_lettered=sum(k.dead_lettered for k in replay.keys),
        deadlines_otherwise=sum(1 for k in replay.keys if k.deadlines_otherwise),
    )


def render(summary: Summary) -> str:
    lines = [
        f"replayed {summary.replayed} keys ({summary.decisions} decisions): "
        f"{summary.identical} identical, {summary.diverging} diverging, "
        f"{len(summary.not_replayable)} not replayable"
    ]
    for group in summary.groups:
        lines += ["", f"{group.channel}  in {group.status}  {group.kind}  x{len(group.keys)}"]
        lines.append(
            "  keys: " + ", ".join(group.keys[:10]) + (" ..." if len(group.keys) > 10 else "")
        )
        if group.example is not None:
            lines += _side_by_side(*group.example)
    if summary.ended is not None:
        lines += ["", f"would have ended differently: {sum(summary.ended.values())}"]
        lines += [f"  {change}: {n}" for change, n in sorted(summary.ended.items())]
    if summary.deadlines_otherwise:
        lines.append(
            f"keys whose deadlines the candidate set otherwise (a divergence only where one "
            f"fired, or no longer fired, before the end of the recording): "
            f"{summary.deadlines_otherwise}"
        )
    if summary.not_replayable:
        lines += ["", f"not replayable: {len(summary.not_replayable)}"]
        reasons = Counter(_reason_kind(r) for r in summary.not_replayable.values())
        for reason, n in reasons.most_common():
            example = next(
                k for k, r in summary.not_replayable.items() if _reason_kind(r) == reason
            )
            lines.append(f"  {n} x {reason} (e.g. {example})")
    if summary.unattributed:
        lines.append(
            f"recorded deadline decisions told to no key (not compared): {summary.unattributed}"
        )
    if summary.dead_lettered:
        lines.append(
            f"inputs the worker dead-lettered (applied by neither run, not compared): "
            f"{summary.dead_lettered}"
        )
    lines += summary.notes
    return "\n".join(lines)


def to_json_text(summary: Summary) -> str:
    return json.dumps(summary.to_json(), indent=2, default=str)


def _side_by_side(key: str, first: Compared) -> list[str]:
    found = Counter(first.differences)
    said = "; ".join(k if n == 1 else f"{k} (x{n})" for k, n in found.items())
    head = f"  first divergent decision: {key} at {first.at.isoformat()} on {first.what}: {said}"
    left, right = _column(first.recorded), _column(first.replayed)
    rows = [f"    {'recorded':<{WIDTH}} | replayed"]
    for i in range(max(len(left), len(right))):
        a = left[i] if i < len(left) else ""
        b = right[i] if i < len(right) else ""
        rows.append(f"    {a:<{WIDTH}} | {b}")
    return [head, *rows]


def _column(sent: Iterable[Sent]) -> list[str]:
    """Each message as a line saying where it goes, then a line per payload field."""
    lines: list[str] = []
    for s in sent:
        e = s.envelope
        lines.append(_fit(f"-> {s.channel} {e.type} {e.key}"))
        lines += [
            _fit(f"     {name}: {json.dumps(value, default=str)}")
            for name, value in e.payload.items()
        ]
    return lines or ["(nothing)"]


def _fit(text: str) -> str:
    return text if len(text) <= WIDTH else text[: WIDTH - 3] + "..."


def _example_json(key: str, first: Compared) -> dict[str, Any]:
    return {
        "key": key,
        "at": first.at.isoformat(),
        "on": first.what,
        "cause": first.cause,
        "differences": list(first.differences),
        "recorded": [s.brief() for s in first.recorded],
        "replayed": [s.brief() for s in first.replayed],
    }


def _reason_kind(reason: str) -> str:
    """A reason without its numbers, so that reasons group."""
    return re.sub(r"[0-9]+", "N", reason)
