"""A slower box on this one: the worker processes held to a share of one core by a cgroup's
CPU quota (``BENCH_WORKER_CPU_SHARE=0.4``: 4 ms of CPU in every 10 ms period).

Issue 27's targets are set on a box about 2.5x slower than this one (its relay and full-load
rates). What reproduces that for the worker is a CPU quota, not ``taskset`` (a core is
still a whole core): the kernel's CFS bandwidth control runs the cgroup's threads for at
most ``share x period`` per period, then stalls them to the period's end. The period is
short (10 ms) so that a stall is short too, as on a slower CPU, where every step is slower
rather than some steps stopped: with Linux's default 100 ms period a worker at 40% would
stop for 60 ms at a time, which no slow CPU does. The driver, the relay and the broker are
not in it: what is measured is the worker on a slow core, against the same load and the
same baseline. cgroup v1 (``/sys/fs/cgroup/cpu``) and v2 (``cpu.max``) both work; root only.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from pathlib import Path

PERIOD_US = 10_000
V1 = Path("/sys/fs/cgroup/cpu")
V2 = Path("/sys/fs/cgroup")


def share_from_env() -> float | None:
    """``BENCH_WORKER_CPU_SHARE`` (a fraction of one core), or None: no quota."""
    raw = os.environ.get("BENCH_WORKER_CPU_SHARE")
    if not raw:
        return None
    share = float(raw)
    if not 0.01 <= share <= 2.0:
        raise ValueError(f"BENCH_WORKER_CPU_SHARE={raw}: give a share of a core, 0.01 to 2")
    return share


def group(name: str, share: float) -> Path:
    """A cgroup named ``name`` whose processes together get ``share`` of one core."""
    quota = round(share * PERIOD_US)
    if (V1 / "cpu.cfs_quota_us").exists():
        path = V1 / name
        path.mkdir(exist_ok=True)
        (path / "cpu.cfs_period_us").write_text(str(PERIOD_US))
        (path / "cpu.cfs_quota_us").write_text(str(quota))
        return path
    path = V2 / name
    path.mkdir(exist_ok=True)
    (path / "cpu.max").write_text(f"{quota} {PERIOD_US}")
    return path


def enter(path: Path, pid: int) -> None:
    """Move process ``pid`` (all its threads) into the cgroup at ``path``."""
    (path / "cgroup.procs").write_text(str(pid))


def remove(path: Path) -> None:
    """Delete the cgroup once its processes are gone (ignored if some are left)."""
    with contextlib.suppress(OSError):
        path.rmdir()


def describe(path: Path, share: float) -> str:
    """The line a benchmark prints: the quota, and the calibration loop's time inside it."""
    probe = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys; sys.stdin.readline()\n"
            "from benchmarks.common import calibration; print(calibration())",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    enter(path, probe.pid)
    out, _ = probe.communicate("go\n", timeout=120)
    return (
        f"worker cpu  held to {share:.2f} of a core (cgroup {path}: "
        f"{round(share * PERIOD_US)} us per {PERIOD_US} us period); in it, {out.strip()}"
    )
