"""Every long-running command stops within 10 s of SIGTERM, whatever is unreachable.

The worker, projector and API run as real processes against a PRIVATE broker (its own
home and ports, started by ``deploy/local/kafka.sh``), which this module stops under them:
the shared broker is never touched. A clean stop exits 0; a stop that cannot finish exits
75 after the grace period with one line saying what was left undone. The rebuild is
stopped in the middle of its run and must leave no Spark JVM and no run lock behind.
``deploy/local/stop.sh`` (``make stop``) must leave no process of ours behind and never
touch a pid that is not ours.

Started the other way round -- the worker, projector and API before the broker -- each waits
for it (SAGALINE_KAFKA_STARTUP_WAIT_S) and runs once it answers, instead of exiting into a
crash loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine
from sqlalchemy.engine import make_url

from readside.migrate import upgrade
from runtime.settings import Settings
from runtime.shutdown import EXIT_UNFINISHED
from runtime.topics import TopicMismatch, check_topics, create_topics
from spark_projections import guard
from spark_projections.session import REPO_ROOT
from tests.integration.harness import (
    ServiceProcess,
    auth_headers,
    free_port,
    isolated_settings,
    settings_env,
)
from tests.integration.readside import fresh_database, produce
from tests.spark import history

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

BROKER_PORT = 19392
CONTROLLER_PORT = 19393
BOOTSTRAP = f"127.0.0.1:{BROKER_PORT}"
KAFKA_HOME = REPO_ROOT / ".local" / "kafka-shutdown"
STOP_WITHIN_S = 10.0


class PrivateBroker:
    """A broker this module may stop: its own home and ports; the jars are shared."""

    env = os.environ | {
        "SAGALINE_KAFKA_HOME": str(KAFKA_HOME),
        "SAGALINE_KAFKA_PORT": str(BROKER_PORT),
        "SAGALINE_KAFKA_CONTROLLER_PORT": str(CONTROLLER_PORT),
        "SAGALINE_KAFKA_SASL_PORT": "off",  # a private broker: no second listener
    }

    def _run(self, command: str) -> None:
        done = subprocess.run(
            [str(REPO_ROOT / "deploy/local/kafka.sh"), command],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=150,
        )
        assert done.returncode == 0, f"kafka.sh {command} failed:\n{done.stderr[-3000:]}"

    def start(self) -> None:
        """Idempotent: returns once the broker answers (started now or already running)."""
        self._run("start")

    def stop(self) -> None:
        self._run("stop")


class Projector(ServiceProcess):
    command = "projector"
    ready_marker = "projecting "


class Api(ServiceProcess):
    command = "api"
    ready_marker = "Application startup complete"


@pytest.fixture(scope="module")
def broker() -> Iterator[PrivateBroker]:
    private = PrivateBroker()
    private.start()
    yield private
    private.stop()


@pytest.fixture
def up(broker: PrivateBroker) -> PrivateBroker:
    """The private broker, running (an earlier test may have stopped it)."""
    broker.start()
    return broker


def component_settings(tmp: Path, **overrides: object) -> Settings:
    """Fresh topics (created), a migrated SQLite read-model database and the worker's
    RocksDB tables in ``tmp``, on the private broker."""
    settings = isolated_settings(
        tmp,
        kafka_bootstrap=BOOTSTRAP,
        database_url=f"sqlite:///{tmp / 'read.db'}",
        api_port=free_port(),
        **overrides,
    )
    asyncio.run(create_topics(settings))
    # A broker that has just started can take a moment to list topics it just created; the
    # worker checks them at start and would refuse to run.
    deadline = time.monotonic() + 30
    while True:
        try:
            asyncio.run(check_topics(settings))
            break
        except TopicMismatch:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)
    upgrade(settings.database_url)
    return settings


@dataclass
class Stopped:
    name: str
    code: int
    seconds: float
    log: str

    def lines_with(self, text: str) -> list[str]:
        return [line for line in self.log.splitlines() if text in line]


def start_all(settings: Settings, log_dir: Path) -> list[ServiceProcess]:
    processes = [
        ServiceProcess(settings, log_dir),
        Projector(settings, log_dir),
        Api(settings, log_dir),
    ]
    for process in processes:
        process.start()
    return processes


def sigterm_all(processes: list[ServiceProcess], give_up_s: float = 30) -> dict[str, Stopped]:
    """SIGTERM every process at once; how each one ended and how long it took."""
    started = time.monotonic()
    for process in processes:
        assert process.proc is not None
        process.proc.send_signal(signal.SIGTERM)
    ended: dict[str, Stopped] = {}
    while len(ended) < len(processes):
        for process in processes:
            assert process.proc is not None
            code = process.proc.poll()
            if code is None and time.monotonic() - started > give_up_s:
                process.proc.kill()
                code = process.proc.wait(10)
            if code is not None and process.command not in ended:
                seconds = time.monotonic() - started
                log = process.tail_log(100_000)
                ended[process.command] = Stopped(process.command, code, seconds, log)
        time.sleep(0.05)
    return ended


def assert_clean(ended: dict[str, Stopped]) -> None:
    for name, stop in ended.items():
        assert stop.seconds < STOP_WITHIN_S, f"{name} took {stop.seconds:.1f}s:\n{stop.log[-3000:]}"
        assert stop.code == 0, f"{name} exited {stop.code}:\n{stop.log[-3000:]}"
        assert not stop.lines_with("shutdown did not finish"), stop.log[-3000:]


def test_with_the_broker_up_each_component_stops_cleanly_and_exits_0(
    up: PrivateBroker, tmp_path: Path
) -> None:
    settings = component_settings(tmp_path)
    processes = start_all(settings, tmp_path)
    assert_clean(sigterm_all(processes))


def wait_for_line(process: ServiceProcess, text: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while text not in process.tail_log(1_000_000):
        assert process.alive(), f"{process.command} exited:\n{process.tail_log()}"
        assert time.monotonic() < deadline, f"no {text!r} in {timeout:.0f} s:\n{process.tail_log()}"
        time.sleep(0.2)


def test_started_before_the_broker_the_worker_projector_and_api_wait_for_it(
    up: PrivateBroker, tmp_path: Path
) -> None:
    settings = component_settings(tmp_path, kafka_startup_wait_s=120.0)
    up.stop()
    processes = [ServiceProcess(settings, tmp_path), Projector(settings, tmp_path)]
    processes.append(Api(settings, tmp_path))
    for process in processes:
        process.ready_marker, marker = None, process.ready_marker
        process.start()
        process.ready_marker = marker
    try:
        for process in processes:
            wait_for_line(process, "trying again in", timeout=30)
        time.sleep(3)  # still waiting, not exited (each has said why it waits)
        assert all(p.alive() for p in processes)
        up.start()
        for process in processes:
            assert process.ready_marker is not None
            wait_for_line(process, process.ready_marker, timeout=90)
        assert_clean(sigterm_all(processes))
    finally:
        for process in processes:
            process.stop()


NOTHING_LISTENS: dict[str, Any] = {"kafka_bootstrap": "127.0.0.1:1", "kafka_startup_wait_s": 2.0}
"""No broker at all (port 1), and a short wait for one."""


def gives_up(command: str, settings: Settings) -> str:
    """Runs ``sagaline <command>`` to its end: it must exit 1 after waiting at least the
    2-s setting, with no traceback; its output."""
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "sagaline.cli", command],
        env=settings_env(settings),
        capture_output=True,
        text=True,
        timeout=60,
    )
    output = done.stdout + done.stderr
    assert done.returncode == 1, output
    assert time.monotonic() - started >= 2.0
    assert "Traceback" not in output, output
    return output


@pytest.mark.parametrize("command", ["worker", "api"])
def test_a_component_gives_up_waiting_for_a_broker_after_the_setting(
    tmp_path: Path, command: str
) -> None:
    database = f"sqlite:///{tmp_path / 'read.db'}"
    settings = isolated_settings(
        tmp_path, database_url=database, api_port=free_port(), **NOTHING_LISTENS
    )
    output = gives_up(command, settings)
    assert "trying again in 1 s" in output, output
    assert "refusing to start: cannot use Kafka at 127.0.0.1:1" in output, output


class CuttableLink:
    """A TCP forwarder to the database that the test can cut: afterwards its port is closed
    (connections refused) and every open connection is gone, as if the database host
    dropped off the network. The components must start against a reachable database (they
    check the schema first), so "unreachable" has to happen under them."""

    def __init__(self, host: str, port: int, listen_on: int = 0) -> None:
        self.upstream = (host, port)
        self.listener = socket.create_server(("127.0.0.1", listen_on))
        self.port = int(self.listener.getsockname()[1])
        self.sockets: list[socket.socket] = []
        self.lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
                upstream = socket.create_connection(self.upstream)
            except OSError:
                return
            with self.lock:
                self.sockets += [client, upstream]
            for src, dst in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(src, dst), daemon=True).start()

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := src.recv(65536):
                dst.sendall(data)
        with contextlib.suppress(OSError):
            dst.shutdown(socket.SHUT_WR)

    def cut(self) -> None:
        with contextlib.suppress(OSError):
            self.listener.shutdown(socket.SHUT_RDWR)  # wakes the blocked accept()
        self.listener.close()
        with self.lock:
            for sock in self.sockets:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
                sock.close()


def test_with_the_database_gone_the_projector_and_the_api_exit_in_time(
    up: PrivateBroker, tmp_path: Path
) -> None:
    settings = component_settings(tmp_path)
    with fresh_database("postgresql", tmp_path) as url:
        real = make_url(url)
        link = CuttableLink(real.host or "127.0.0.1", real.port or 5432)
        via_link = real.set(host="127.0.0.1", port=link.port)
        settings = settings.model_copy(
            update={"database_url": via_link.render_as_string(hide_password=False)}
        )
        processes: list[ServiceProcess] = [Projector(settings, tmp_path), Api(settings, tmp_path)]
        try:
            for process in processes:
                process.start()
            link.cut()
            # Events arrive; the projector's batch fails and it retries until the database
            # answers, which it never will: a stop that cannot finish that batch.
            asyncio.run(produce(settings, list(history.encoded(history.order_history(3)))))
            deadline = time.monotonic() + 30
            while "batch failed" not in processes[0].tail_log(100_000):
                assert time.monotonic() < deadline, processes[0].tail_log()
                time.sleep(0.2)
            ended = sigterm_all(processes)
        finally:
            for process in processes:
                process.stop()
    projector = ended["projector"]
    assert projector.seconds < STOP_WITHIN_S, projector.log[-3000:]
    assert projector.code == EXIT_UNFINISHED, projector.log[-3000:]
    assert len(projector.lines_with("projector: shutdown did not finish within 8 s")) == 1
    api = ended["api"]  # nothing of its own to finish: it closes its pool and exits 0
    assert_clean({"api": api})


def test_started_before_its_database_the_projector_waits_and_the_api_serves(
    up: PrivateBroker, tmp_path: Path
) -> None:
    settings = component_settings(tmp_path, database_startup_wait_s=120.0)
    with fresh_database("postgresql", tmp_path) as url:
        real = make_url(url)
        port = free_port()  # the database's address, where nothing listens yet
        later = real.set(host="127.0.0.1", port=port).render_as_string(hide_password=False)
        settings = settings.model_copy(update={"database_url": later})
        processes: list[ServiceProcess] = [Projector(settings, tmp_path), Api(settings, tmp_path)]
        projector, api = processes
        projector.ready_marker, marker = None, projector.ready_marker
        assert marker is not None
        link = None
        try:
            for process in processes:
                process.start()
            projector.ready_marker = marker
            wait_for_line(projector, "(SAGALINE_DATABASE_STARTUP_WAIT_S:", timeout=30)
            assert "cannot use the read-model database at postgresql" in projector.tail_log()
            # The API started: commands need only the broker; reads answer 503 meanwhile.
            assert "reads answer 503 until it answers" in api.tail_log(), api.tail_log()
            base, headers = f"http://127.0.0.1:{settings.api_port}", auth_headers(settings)
            health = urllib.request.Request(f"{base}/healthz", headers=headers)
            with urllib.request.urlopen(health, timeout=10) as ok:
                assert ok.status == 200
            read = urllib.request.Request(f"{base}/orders/o-1", headers=headers)
            with pytest.raises(urllib.error.HTTPError) as answered:
                urllib.request.urlopen(read, timeout=30)
            assert answered.value.code == 503, answered.value.read()
            assert projector.alive()
            link = CuttableLink(real.host or "127.0.0.1", real.port or 5432, listen_on=port)
            wait_for_line(projector, marker, timeout=60)
            assert_clean(sigterm_all(processes))
        finally:
            for process in processes:
                process.stop()
            if link is not None:
                link.cut()


def test_a_projector_gives_up_waiting_for_its_database_after_the_setting(
    tmp_path: Path,
) -> None:
    nobody = f"postgresql+psycopg://sagaline:x@127.0.0.1:{free_port()}/sagaline"
    settings = isolated_settings(
        tmp_path, database_url=nobody, database_startup_wait_s=2.0, **NOTHING_LISTENS
    )
    output = gives_up("projector", settings)
    assert "trying again in 1 s (SAGALINE_DATABASE_STARTUP_WAIT_S:" in output, output
    assert "cannot use the read-model database at postgresql+psycopg://sagaline:***@" in output


def test_with_the_broker_gone_each_component_exits_in_time_with_one_line(
    up: PrivateBroker, tmp_path: Path
) -> None:
    settings = component_settings(tmp_path)
    processes = start_all(settings, tmp_path)
    try:
        up.stop()
        time.sleep(2)  # the clients notice: connections refused, metadata refreshes failing
        ended = sigterm_all(processes)
    finally:
        for process in processes:
            process.stop()
    for name, stop in ended.items():
        assert stop.seconds < STOP_WITHIN_S, f"{name} took {stop.seconds:.1f}s:\n{stop.log[-3000:]}"
        undone = stop.lines_with(f"{name}: shutdown did not finish")
        if stop.code == 0:  # it managed a clean stop without the broker: nothing left undone
            assert undone == [], stop.log[-3000:]
        else:
            assert stop.code == EXIT_UNFINISHED, f"{name} exited {stop.code}:\n{stop.log[-3000:]}"
            assert len(undone) == 1, stop.log[-3000:]
    # The worker is the one issue 7 is about: its fetcher usually never closes without a
    # broker (then the watchdog ends it and says so); when it does close in time, the
    # clean stop above was checked.
    worker = ended["worker"]
    if worker.code == EXIT_UNFINISHED:
        assert worker.lines_with("exiting without a final offset commit"), worker.log[-3000:]


STRAGGLER = """#!{python}
import signal, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a stop that never ends
print("ready", flush=True)
time.sleep(120)
"""


def test_make_stop_leaves_nothing_behind_and_spares_pids_that_are_not_ours(
    up: PrivateBroker, tmp_path: Path
) -> None:
    projector = Projector(component_settings(tmp_path), tmp_path)
    projector.start()
    # A `sagaline worker` that ignores SIGTERM (stop.sh must SIGKILL it after 12 s), and a
    # stranger whose pid sits in a stale pid file (stop.sh must leave it alone).
    fake = tmp_path / "bin" / "sagaline"
    fake.parent.mkdir()
    fake.write_text(STRAGGLER.format(python=sys.executable))
    fake.chmod(0o755)
    straggler = subprocess.Popen([str(fake), "worker"], stdout=subprocess.PIPE, text=True)
    stranger = subprocess.Popen(["sleep", "120"])
    try:
        assert straggler.stdout is not None and straggler.stdout.readline() == "ready\n"
        pid_dir = tmp_path / "pids"
        pid_dir.mkdir()
        assert projector.proc is not None
        for name, pid in [
            ("worker", straggler.pid),
            ("projector", projector.proc.pid),
            ("api", stranger.pid),
        ]:
            (pid_dir / f"{name}.pid").write_text(f"{pid}\n")
        started = time.monotonic()
        done = subprocess.run(
            [str(REPO_ROOT / "deploy/local/stop.sh"), str(pid_dir)],
            capture_output=True,
            text=True,
            timeout=60,
        )
        took = time.monotonic() - started
        said = f"stdout:\n{done.stdout}\nstderr:\n{done.stderr}"
        assert done.returncode == 0, said
        assert straggler.wait(5) == -signal.SIGKILL, said
        assert projector.proc.wait(5) == 0, projector.tail_log()
        assert 11 < took < 16, f"{took:.1f}s\n{said}"
        assert done.stderr.splitlines() == [
            f"killed worker (pid {straggler.pid}) with SIGKILL: still running 12 s after SIGTERM"
        ], said
        assert stranger.poll() is None, "stop.sh signalled a pid that is not ours"
        assert list(pid_dir.iterdir()) == []
    finally:
        for proc in (straggler, stranger):
            proc.kill()
            proc.wait()
        projector.stop()


def descendants(pid: int) -> dict[int, str]:
    """Every process below ``pid`` (from /proc), with its command line."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(entry.name))
    found: dict[int, str] = {}
    todo = list(children.get(pid, []))
    while todo:
        child = todo.pop()
        found[child] = cmdline(child)
        todo.extend(children.get(child, []))
    return found


def cmdline(pid: int) -> str:
    try:
        return (Path("/proc") / str(pid) / "cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def test_a_rebuild_stopped_midway_exits_in_time_without_its_jvm_or_its_lock(
    up: PrivateBroker, tmp_path: Path
) -> None:
    settings = component_settings(
        tmp_path,
        log_level="WARNING",
        rebuild_scratch_dir=tmp_path / "scratch",
        spark_shuffle_partitions=2,
        spark_kafka_min_partitions=0,
    )
    asyncio.run(produce(settings, list(history.encoded(history.order_history(20, products=3)))))
    log = tmp_path / "rebuild.log"
    env = settings_env(settings) | {"SAGALINE_REBUILD_PAUSE_BEFORE_SWAP_S": "300"}
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "sagaline.cli", "rebuild"],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # so the finally below can sweep whatever it left
        )
    try:
        deadline = time.monotonic() + 240
        while "stage=read" not in log.read_text(errors="replace"):
            assert proc.poll() is None, log.read_text()[-3000:]
            assert time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.2)
        below = descendants(proc.pid)
        assert any("java" in command for command in below.values()), below
        started = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(30)
        took = time.monotonic() - started
        text = log.read_text(errors="replace")
        assert took < STOP_WITHIN_S, f"{took:.1f}s:\n{text[-3000:]}"
        assert code == EXIT_UNFINISHED, text[-3000:]
        assert (
            len([line for line in text.splitlines() if "rebuild: stopped by SIGTERM" in line]) == 1
        )
        time.sleep(1)  # the JVM's own Python workers notice their parent is gone
        left = {p: c for p, c in below.items() if cmdline(p) == c and c}
        assert left == {}, f"left behind: {left}"
        assert not (tmp_path / "scratch").exists(), "the scratch directory was not emptied"
        engine = create_engine(settings.database_url)
        try:
            with guard.exclusive(engine):  # raises AlreadyRunning if the lock were still held
                pass
        finally:
            engine.dispose()
    finally:
        if proc.poll() is None:
            proc.kill()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)
