"""The watchdog ends a process stuck in its shutdown, and only one that is stuck.

It calls ``os._exit``, so each case runs in a child Python.
"""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from runtime.shutdown import EXIT_UNFINISHED

pytestmark = pytest.mark.unit

PRELUDE = """
import logging, os, signal, time
logging.basicConfig(level=logging.INFO, format="%(message)s")
from runtime.shutdown import Watchdog, on_stop_signals
watchdog = Watchdog("demo", 0.5, "left the thing undone")
"""


def run_child(body: str, terminate: bool = False) -> tuple[int, str, float]:
    """Run ``body`` after the prelude; with ``terminate``, SIGTERM it once it prints ready."""
    started = time.monotonic()
    proc = subprocess.Popen(
        [sys.executable, "-c", PRELUDE + body],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert proc.stdout is not None
    head = ""
    if terminate:
        head = proc.stdout.readline()
        assert head == "ready\n", head
        proc.terminate()
    out, _ = proc.communicate(timeout=20)
    return proc.returncode, head + out, time.monotonic() - started


def test_a_stuck_stop_ends_after_the_grace_period_with_one_line() -> None:
    code, out, took = run_child("watchdog.arm(signal.SIGTERM)\nwhile True: time.sleep(1)")
    assert code == EXIT_UNFINISHED
    lines = [line for line in out.splitlines() if "shutdown did not finish" in line]
    assert lines == ["demo: shutdown did not finish within 0.5 s; left the thing undone"]
    assert took < 5


def test_a_stop_that_finishes_in_time_keeps_its_own_exit_code() -> None:
    code, out, _ = run_child("watchdog.arm(signal.SIGTERM)\ntime.sleep(0.1)")
    assert code == 0
    assert "shutdown did not finish" not in out


def test_a_second_signal_does_not_restart_the_countdown() -> None:
    body = (
        "watchdog.arm(signal.SIGTERM)\ntime.sleep(0.3)\nwatchdog.arm(signal.SIGINT)\ntime.sleep(5)"
    )
    code, _, took = run_child(body)
    assert code == EXIT_UNFINISHED
    assert took < 3


def test_a_failed_stop_ends_now_with_the_error_in_the_line() -> None:
    code, out, took = run_child("watchdog.fail(RuntimeError('consumer\\nclosed badly'))")
    assert code == EXIT_UNFINISHED
    assert "demo: shutdown did not finish (stopping raised RuntimeError: consumer); left" in out
    assert took < 5


def test_signal_handlers_arm_the_watchdog() -> None:
    body = "on_stop_signals(watchdog.arm)\nprint('ready', flush=True)\nwhile True: time.sleep(0.05)"
    code, out, _ = run_child(body, terminate=True)
    assert code == EXIT_UNFINISHED
    assert "demo: SIGTERM; stopping" in out
