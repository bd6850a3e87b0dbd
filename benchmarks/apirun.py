"""Pieces of the REST benchmarks (bench_api, bench_rest_e2e): wrk, an API process, CPU time.

The load driver is `wrk` (C, installed from Debian's packages when missing): a Python HTTP
client saturates its own core at ~130 requests/s on this machine, so it would measure itself.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from runtime.settings import Settings
from tests.integration.harness import settings_env

REPO = Path(__file__).resolve().parent.parent
LUA = REPO / "benchmarks" / "wrk" / "orders.lua"
TICKS = os.sysconf("SC_CLK_TCK")


def ensure_wrk() -> str:
    """The path of `wrk`; installed with apt-get (apt-get update once) when missing."""
    found = shutil.which("wrk")
    if found:
        return found
    print("wrk missing: apt-get update && apt-get install -y wrk", flush=True)
    subprocess.run(["apt-get", "update", "-qq"], check=True, stdout=subprocess.DEVNULL)
    subprocess.run(["apt-get", "install", "-y", "-qq", "wrk"], check=True)
    found = shutil.which("wrk")
    if found is None:
        raise SystemExit("apt-get installed wrk but it is not on PATH")
    return found


def lscpu_model() -> str:
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    fields = dict(line.split(":", 1) for line in out.splitlines() if ":" in line)
    return f"{fields.get('Model name', '?').strip()}, {fields.get('CPU(s)', '?').strip()} CPUs"


def cpu_seconds(pid: int) -> float:
    """utime + stime of ``pid`` and its live children (uvicorn workers), from /proc."""
    total = 0.0
    for p in [pid, *_children(pid)]:
        try:
            with open(f"/proc/{p}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / TICKS  # utime, stime (fields 14, 15)
    return total


def _children(pid: int) -> list[int]:
    found: list[int] = []
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            direct = [int(c) for c in f.read().split()]
    except OSError:
        return found
    for child in direct:
        found += [child, *_children(child)]
    return found


@dataclass
class WrkResult:
    requests: int
    seconds: float
    ok: int
    non2xx: int
    errors: int
    p50_ms: float
    p99_ms: float
    wrk_cpu_s: float
    api_cpu_s: float

    @property
    def rate(self) -> float:
        return self.requests / self.seconds

    def line(self) -> str:
        return (
            f"{self.rate:8,.0f} req/s  p50={self.p50_ms:.1f} ms p99={self.p99_ms:.1f} ms  "
            f"non-2xx={self.non2xx} socket-errors={self.errors}  "
            f"cpu over {self.seconds:.0f} s: api {self.api_cpu_s:.1f} s, wrk {self.wrk_cpu_s:.1f} s"
        )


def run_wrk(
    url: str,
    mode: str,
    *,
    key: str,
    prefix: str,
    seconds: float,
    connections: int = 32,
    threads: int = 2,
    api_pid: int | None = None,
    stop_after_per_thread: int = 0,
    products: int = 200,
) -> WrkResult:
    """One wrk run; the CPU seconds of wrk (its rusage) and of the API (from /proc)."""
    cmd = [
        ensure_wrk(),
        f"-t{threads}",
        f"-c{connections}",
        f"-d{max(1, round(seconds))}s",
        "--timeout",
        "10s",
        "-s",
        str(LUA),
        url,
        "--",
        mode,
        prefix,
        key,
        str(stop_after_per_thread),
        str(products),
    ]
    stop_file = Path(tempfile.mkdtemp()) / "stopped"
    if stop_after_per_thread:
        cmd.append(str(stop_file))
    api_before = cpu_seconds(api_pid) if api_pid else 0.0
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    waiting = stop_after_per_thread > 0
    while True:
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG if waiting else 0)
        if pid:
            break
        if stop_file.exists() and len(stop_file.read_text().split()) >= threads:
            # Every thread has sent its share: end wrk now instead of at its -d bound.
            proc.send_signal(signal.SIGINT)
            waiting = False
        time.sleep(0.05)
    proc.returncode = os.waitstatus_to_exitcode(status)
    out = proc.stdout.read() if proc.stdout else ""
    api_after = cpu_seconds(api_pid) if api_pid else 0.0
    lines = [line for line in out.splitlines() if line.startswith("WRKJSON ")]
    if proc.returncode != 0 or not lines:
        raise SystemExit(f"wrk failed ({proc.returncode}):\n{out}")
    data = json.loads(lines[-1].removeprefix("WRKJSON "))
    return WrkResult(
        requests=data["requests"],
        seconds=data["duration_us"] / 1e6,
        ok=data["ok"],
        non2xx=data["non2xx"],
        errors=data["connect"] + data["read"] + data["write"] + data["timeout"],
        p50_ms=data["p50_us"] / 1000,
        p99_ms=data["p99_us"] / 1000,
        wrk_cpu_s=usage.ru_utime + usage.ru_stime,
        api_cpu_s=api_after - api_before,
    )


class ApiProcess:
    """`sagaline api` as a process, from this checkout, or from another commit's tree
    (``source``) served the way that commit's dependencies serve it."""

    def __init__(
        self,
        settings: Settings,
        log: Path,
        *,
        source: Path | None = None,
        extra_env: dict[str, str] | None = None,
    ) -> None:
        self.settings = settings
        self.log = log
        self.source = source
        self.extra_env = extra_env or {}
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://{self.settings.api_host}:{self.settings.api_port}"

    def start(self, timeout: float = 60) -> None:
        env = settings_env(self.settings) | self.extra_env
        if self.source is None:
            cmd = [sys.executable, "-m", "sagaline.cli", "api"]
            cwd = REPO
        else:
            cmd = [sys.executable, str(REPO / "benchmarks" / "serve_plain.py")]
            cwd = self.source
            env["PYTHONPATH"] = str(self.source)
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=out, stderr=out)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise SystemExit(f"the API exited: {self.log.read_text()[-3000:]}")
            try:
                with urllib.request.urlopen(self.url + "/healthz", timeout=1) as r:
                    if r.status == 200:
                        return
            except OSError:
                time.sleep(0.3)
        raise SystemExit(f"the API did not answer in {timeout} s: {self.log.read_text()[-3000:]}")

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


def archive(ref: str, into: Path) -> Path:
    """The tree of ``ref`` (e.g. main) unpacked into ``into``: the baseline's code."""
    into.mkdir(parents=True, exist_ok=True)
    tar = subprocess.run(["git", "archive", ref], cwd=REPO, capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=tar, check=True)
    return into


def short_rev(ref: str) -> str:
    return subprocess.run(
        ["git", "rev-parse", "--short", ref], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout.strip()
