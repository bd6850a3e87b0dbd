"""The processes a run starts: the private broker and the three Sagaline services.

Every child gets PR_SET_PDEATHSIG, so it dies with the harness however the harness dies;
the broker (started by kafka.sh with setsid, so it outlives its caller) is stopped and
reset by the run's ``finally`` and by its signal handlers. Nothing is killed by name: only
PIDs this process started.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parent.parent
ABORT = threading.Event()
"""Set on Ctrl-C / SIGTERM: every wait in a helper thread returns early, so the run unwinds
(and cleans up) at once instead of after the fault in progress."""


def pause(seconds: float) -> bool:
    """Sleep unless the run is aborted; False when it was."""
    return not ABORT.wait(seconds)


KAFKA_SH = REPO / "deploy" / "local" / "kafka.sh"


def _die_with_parent() -> None:
    """Runs in the child before exec: SIGKILL it when the harness dies, however it dies."""
    pr_set_pdeathsig = 1
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(pr_set_pdeathsig, signal.SIGKILL)


class Service:
    """``python -m sagaline.cli <command>`` as a real process that faults can hit."""

    def __init__(
        self,
        command: str,
        env: dict[str, str],
        log_dir: Path,
        name: str | None = None,
        argv: list[str] | None = None,
    ) -> None:
        self.command = command
        self.name = name or command
        """Which one it is (``worker2`` among several workers); names its logs."""
        self.argv = argv or [sys.executable, "-m", "sagaline.cli", command]
        self.env = env
        self.log_dir = log_dir
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0
        self.log = log_dir / f"{self.name}-0.log"
        self.expected_down = False
        """True while a fault holds it down: the supervisor must not count that as a crash."""
        self.stopped = False
        """True while SIGSTOPped."""
        self._starting = threading.Lock()

    def start(self) -> bool:
        """Start it unless it runs; False when it ran. Several parties restart a dead
        service (the supervisor, a fault's own restart, the cycle's last check that all are
        up), each from a thread of its own: without the lock two of them saw the same death
        and started two processes on one data directory (RELIABILITY.md)."""
        with self._starting:
            if self.alive():
                return False
            self._spawn()
            return True

    def _spawn(self) -> None:
        self.starts += 1
        self.log = self.log_dir / f"{self.name}-{self.starts}.log"
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen(
                self.argv,
                env=self.env,
                cwd=REPO,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                preexec_fn=_die_with_parent,
            )
        self.expected_down = False

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def exit_code(self) -> int | None:
        return None if self.proc is None else self.proc.poll()

    def signal(self, sig: signal.Signals) -> None:
        if self.alive():
            assert self.proc is not None
            self.proc.send_signal(sig)
            self.stopped = sig == signal.SIGSTOP or (self.stopped and sig != signal.SIGCONT)

    def sigkill(self) -> None:
        """SIGKILL: no shutdown hook, no flush, no commit."""
        self.expected_down = True
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(30)
        self.stopped = False

    def terminate(self, grace: float = 20.0) -> None:
        """SIGTERM (after SIGCONT, a stopped process cannot exit), then SIGKILL."""
        self.expected_down = True
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGCONT)
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(3.0 if ABORT.is_set() else grace)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)

    def log_text(self) -> str:
        try:
            return self.log.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def wait_for_log(self, marker: str, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if marker in self.log_text():
                return True
            if not self.alive() or not pause(0.2):
                return False
        return False

    def wait_http(self, url: str, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.alive():
                return False
            try:
                if httpx.get(url, timeout=2).status_code == 200:
                    return True
            except httpx.HTTPError:
                pass
            if not pause(0.2):
                return False
        return False


class Broker:
    """The run's own broker, through deploy/local/kafka.sh with a private home and ports."""

    def __init__(self, home: Path, port: int, controller_port: int, log: Path) -> None:
        self.home = home
        self.port = port
        self.controller_port = controller_port
        self.log = log
        self.env = dict(os.environ) | {
            "SAGALINE_KAFKA_HOME": str(home),
            "SAGALINE_KAFKA_PORT": str(port),
            "SAGALINE_KAFKA_CONTROLLER_PORT": str(controller_port),
            # A broker of the harness's own: no SASL listener, whatever the caller's env says
            # (an inherited SAGALINE_KAFKA_SASL_PORT would collide with the main broker's).
            "SAGALINE_KAFKA_SASL_PORT": "off",
        }

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def _script(self, *args: str, timeout: float = 180) -> None:
        with open(self.log, "ab") as out:
            subprocess.run(
                [str(KAFKA_SH), *args],
                env=self.env,
                cwd=REPO,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                check=True,
                timeout=timeout,
            )

    def start(self) -> None:
        self._script("start")

    def reset(self) -> None:
        """Stop (SIGTERM, then SIGKILL) and delete its data and logs; the jars stay."""
        self._script("reset")

    def pid(self) -> int | None:
        try:
            pid = int((self.home / "kafka.pid").read_text().strip())
        except (FileNotFoundError, ValueError):
            return None
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            return None
        # Only ever our own broker: the one running with our home's server.properties.
        return pid if str(self.home / "server.properties") in cmdline else None

    def sigkill(self) -> None:
        pid = self.pid()
        if pid is None:
            return
        os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 30
        while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
            time.sleep(0.1)


CRASH_MARK = "]: Crashed reason="
"""How mode logs a service of a Faust worker that raised and stopped the worker: never by
design (a designed exit logs its reason and exits 75 or 1), so always a finding."""


def crashes(logs: list[Path]) -> list[tuple[str, str]]:
    """(log file, line) of every crashed service in ``logs``."""
    found = []
    for log in logs:
        try:
            with open(log, errors="replace") as f:
                found += [(log.name, line.strip()[:300]) for line in f if CRASH_MARK in line]
        except FileNotFoundError:
            continue
    return found
