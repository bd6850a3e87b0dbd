"""The harness's processes: a service is started once however many parties restart it at
once (the supervisor and the cycle's last look both started one worker after one death)."""

import sys
import threading
from pathlib import Path

import pytest

from faults.procs import Service

pytestmark = pytest.mark.unit

SLEEPER = [sys.executable, "-c", "import time; time.sleep(60)"]


def test_parties_restarting_one_dead_service_at_once_start_one_process(tmp_path: Path) -> None:
    service = Service("worker", {}, tmp_path, "worker3", argv=SLEEPER)
    try:
        parties = 8
        barrier = threading.Barrier(parties + 1)
        started: list[bool] = []
        # The children die with the thread that started them (PR_SET_PDEATHSIG is per
        # thread), as the harness's long-lived executor threads do not: each party waits
        # here until the assertions are done.
        release = threading.Event()

        def restart() -> None:
            barrier.wait()
            started.append(service.start())
            barrier.wait()
            release.wait(30)

        threads = [threading.Thread(target=restart) for _ in range(parties)]
        for thread in threads:
            thread.start()
        barrier.wait()  # all at once
        barrier.wait()  # all have started or found it running
        assert started.count(True) == 1
        assert service.starts == 1
        assert service.alive()
        assert sorted(p.name for p in tmp_path.iterdir()) == ["worker3-1.log"]
    finally:
        release.set()
        service.sigkill()


def test_a_dead_service_starts_again_and_a_live_one_does_not(tmp_path: Path) -> None:
    service = Service("worker", {}, tmp_path, "worker3", argv=SLEEPER)
    try:
        assert service.start()
        first = service.pid
        assert not service.start()
        assert service.pid == first
        service.sigkill()
        assert service.start()
        assert service.pid != first and service.starts == 2
    finally:
        service.sigkill()
