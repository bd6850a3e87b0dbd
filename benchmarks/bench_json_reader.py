"""The JSON reader of untrusted bytes: its cost per ordinary record beside the parsers it was
chosen from, and its cost on the review's worst shapes beside the reader it replaced.

``python -m benchmarks.bench_json_reader``. The baseline, "before", is the reader of
efb2267 inlined here (``json.loads`` with hooks, after a regex scan of the brackets outside
strings, which rescanned an unterminated string from every escaped quote); the candidates
are ``json.loads`` with the hooks alone, orjson (if installed), msgspec, and
``sagas.untrusted.read_json`` (msgspec plus the walk). No broker: a pure CPU measure, the
best of several rounds.
"""

from __future__ import annotations

import contextlib
import json
import math
import re
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec

from benchmarks.common import machine
from faults.fuzz import REVIEW_SHAPES, filled
from sagas.untrusted import read_json

ROOT = Path(__file__).resolve().parents[1]
_TOKENS = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{}]', re.DOTALL)


def before(raw: bytes) -> Any:
    """The reader of efb2267, as it was: the bracket scan when a text has more than 32
    brackets, then ``json.loads`` with the hooks."""
    text = raw.decode("utf-8")
    if text.count("[") + text.count("{") > 32:
        depth = deepest = 0
        for match in _TOKENS.finditer(text):
            token = match.group()
            if token in "[{":
                depth += 1
                deepest = max(deepest, depth)
                if deepest > 32:
                    raise ValueError("too deep")
            elif token in "]}":
                depth -= 1
    return _hooked(text)


def _hooked(text: str | bytes) -> Any:
    return json.loads(text, parse_constant=_refuse, parse_int=_int, parse_float=_float)


def _refuse(name: str) -> Any:
    raise ValueError(name)


def _int(digits: str) -> int:
    if len(digits.lstrip("-")) > 19:
        raise ValueError("out of range")
    return int(digits)


def _float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError("out of range")
    return value


def _readers() -> dict[str, Callable[[bytes], Any]]:
    readers: dict[str, Callable[[bytes], Any]] = {
        "before (efb2267)": before,
        "json.loads + hooks": _hooked,
        "msgspec": msgspec.json.decode,
        "read_json (now)": read_json,
    }
    try:
        import orjson

        readers["orjson"] = orjson.loads
    except ImportError:
        pass
    return readers


def _records() -> dict[str, bytes]:
    fixture = ROOT / "tests/fixtures/debezium/schemas-true.jsonl"
    debezium = json.loads(fixture.read_text().splitlines()[0])["value"].encode()
    lines = [{"product_id": f"p-{i}", "quantity": 2, "unit_price": "10.50"} for i in range(3)]
    place = {
        "message_id": "cmd-1f0c",
        "type": "order.Place",
        "schema_version": 1,
        "key": "order-7d1e",
        "saga_id": "order-7d1e",
        "occurred_at": "2026-11-25T12:00:00Z",
        "payload": {"customer_id": "c-1", "lines": lines, "payment": {"method": "card"}},
    }
    reserve = {
        "message_id": "order-7d1e/reserve/p-1",
        "type": "ledger.Reserve",
        "schema_version": 1,
        "key": "p-1",
        "saga_id": "order-7d1e",
        "reply_to": "order-saga",
        "occurred_at": "2026-11-25T12:00:00Z",
        "payload": {"reservation_id": "order-7d1e", "quantity": 2, "ttl_seconds": 120.0},
    }
    return {
        "ledger.Reserve command": json.dumps(reserve).encode(),
        "order.Place command (3 lines)": json.dumps(place).encode(),
        "Debezium change (schemas.enable=true)": debezium,
    }


def best_of(read: Callable[[bytes], Any], raw: bytes, seconds: float) -> float:
    """The best time of one read over rounds filling ``seconds`` (refusals count too)."""
    best = math.inf
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        started = time.perf_counter()
        with contextlib.suppress(
            ValueError, RecursionError, msgspec.DecodeError, msgspec.ValidationError
        ):
            read(raw)
        best = min(best, time.perf_counter() - started)
    return best


def main() -> None:
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT
    ).stdout.strip()
    print(f"machine: {machine()}")
    print(f"commit: {commit}")
    readers = _readers()
    print("\nOrdinary records, microseconds per read (best of ~0.5 s), ratio to before:")
    for name, raw in _records().items():
        base = best_of(before, raw, 0.5)
        cells = []
        for reader_name, read in readers.items():
            took = base if read is before else best_of(read, raw, 0.5)
            cells.append(f"{reader_name} {took * 1e6:.2f} us ({took / base:.2f}x)")
        print(f"- {name}, {len(raw)} B: " + "; ".join(cells))
    print("\nThe review's worst shapes, milliseconds per read (ms per KiB):")
    for shape_name, shape in REVIEW_SHAPES.items():
        cells = []
        for kib in (8, 16, 32, 64, 512):
            raw = filled(shape, kib * 1024).expand()
            now = best_of(read_json, raw, 0.2)
            cell = f"{kib} KiB: now {now * 1e3:.2f} ({now * 1e3 / kib:.4f})"
            if kib <= 32:  # the old reader is quadratic: 64 KiB takes it tens of seconds
                old = best_of(before, raw, 0.01)
                cell += f", before {old * 1e3:.1f} ({old * 1e3 / kib:.3f})"
            cells.append(cell)
        print(f"- {shape_name}: " + "; ".join(cells))


if __name__ == "__main__":
    main()
