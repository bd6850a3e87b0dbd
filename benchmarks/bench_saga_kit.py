"""The saga kit's cost: an order and an enrollment saga decided on the kit, beside the same
sagas as they were hand-written before it (loaded from git at BASE), in one run.

Each round drives one saga through its whole happy path with ``sagas.machinery.step.step``
(what the worker calls per message), envelopes built before the clock starts; rounds of
the kit and of the baseline alternate, so a noisy neighbour slows both alike.

    .venv/bin/python -m benchmarks.bench_saga_kit [--rounds 30] [--sagas 300]
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import sagas.domains  # noqa: F401  (registers every domain's contracts)
from benchmarks.common import machine
from sagas.definitions.enrollment_saga import EnrollmentSaga
from sagas.definitions.order_saga import OrderSaga
from sagas.machinery.step import step
from sagas.messages import Envelope
from tests.unit import test_enrollment_saga as en
from tests.unit import test_order_saga as o
from tests.unit.helpers import T0

BASE = "f92542a"
"""The last commit before the kit: its hand-written order and enrollment sagas."""


def old_definition(path: str, name: str) -> Any:
    source = subprocess.run(
        ["git", "show", f"{BASE}:{path}"], check=True, capture_output=True, text=True
    ).stdout
    file = Path(tempfile.mkdtemp()) / Path(path).name
    file.write_text(source)
    spec = importlib.util.spec_from_file_location(f"old_{file.stem}", file)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return getattr(module, name)()


def order_path() -> list[Envelope]:
    return [
        o.place(),
        *(o.reserved(p) for p in ("p1", "p2")),
        o.answer(o.AUTHORIZED),
        *(o.confirmed(p) for p in ("p1", "p2")),
        o.answer(o.CAPTURED),
    ]


def enrollment_path() -> list[Envelope]:
    return [en.enroll(), en.seat_held(), en.credits_held(), en.seat_confirmed(),
            en.credits_confirmed()]  # fmt: skip


def timed(process: Any, paths: list[list[Envelope]]) -> float:
    """CPU microseconds per saga (the process's: the box is shared)."""
    started = time.process_time()
    for path in paths:
        record = None
        for env in path:
            record = step(process, record, env, T0).record
    return (time.process_time() - started) / len(paths) * 1e6


def compare(name: str, new: Any, old: Any, path: Callable[[], list[Envelope]],
            rounds: int, sagas: int) -> None:  # fmt: skip
    paths = [path() for _ in range(sagas)]  # each saga starts from no record
    timed(new, paths[:20]), timed(old, paths[:20])  # warm up both
    kit, hand = [], []
    for _ in range(rounds):
        kit.append(timed(new, paths))
        hand.append(timed(old, paths))
    k, h = statistics.median(kit), statistics.median(hand)
    steps = len(paths[0])
    print(f"{name:<10} {steps} messages: kit {k:7.0f} us/saga, hand-written {h:7.0f} us/saga, "
          f"kit/hand {k / h:.2f}x")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--sagas", type=int, default=300)
    args = parser.parse_args()
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()  # fmt: skip
    print(machine())
    print(f"commit {commit}, baseline {BASE}; median of {args.rounds} alternating rounds")
    old_order = old_definition("sagas/definitions/order_saga.py", "OrderSaga")
    old_enrollment = old_definition("sagas/definitions/enrollment_saga.py", "EnrollmentSaga")
    compare("order", OrderSaga(), old_order, order_path, args.rounds, args.sagas)
    compare("enrollment", EnrollmentSaga(), old_enrollment, enrollment_path, args.rounds,
            args.sagas)  # fmt: skip


if __name__ == "__main__":
    main()
