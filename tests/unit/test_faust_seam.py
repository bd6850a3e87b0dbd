"""The worker runs only on a faust-streaming its Faust internals were checked against
(services/worker/faust_seam.py), and says so in a sentence when it will not."""

import ast
import asyncio
import logging
import threading
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from faust.types import TP
from mode.threads import QueueServiceThread

from runtime.settings import Settings
from sagas.participants.ledger import CapacityLedger
from services.worker import faust_seam
from services.worker.changelog_reads import ChangelogReads
from services.worker.faust_app import create_app
from services.worker.faust_seam import TESTED_FAUST, UntestedFaust, require_tested_faust
from tests.unit.test_changelog_reads import Partitions, State

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("untested", ["0.15.2", "0.16.0", "1.0.0"])
def test_an_untested_faust_is_refused_with_a_sentence_saying_what_to_do(
    untested: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(faust_seam, "installed_faust_version", lambda: untested)
    with pytest.raises(UntestedFaust) as refused:
        require_tested_faust()
    assert str(refused.value) == (
        f"faust-streaming {untested} is installed, but the worker reaches into Faust internals "
        "tested only with faust-streaming <0.16,>=0.15.3: install a tested version "
        "(pip install 'faust-streaming[rocksdict]<0.16,>=0.15.3') or re-check "
        "services/worker/faust_seam.py against it and widen TESTED_FAUST."
    )


def test_the_worker_is_not_assembled_on_an_untested_faust(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(faust_seam, "installed_faust_version", lambda: "0.16.0")
    with pytest.raises(UntestedFaust, match=r"^faust-streaming 0\.16\.0 is installed"):
        create_app(Settings(data_dir=tmp_path, store="memory"), [])


def test_the_installed_faust_is_tested_and_the_worker_is_assembled_on_it(tmp_path: Path) -> None:
    assert faust_seam.installed_faust_version() in TESTED_FAUST
    settings = Settings(data_dir=tmp_path, store="memory")
    app, [runner] = create_app(settings, [CapacityLedger(name="inventory", entity_type="product")])
    assert runner.name == "inventory"
    topics = {topic for agent in app.agents.values() for topic in agent.channel.topics}
    assert settings.topic("inventory") in topics


PUBLIC_FAUST = {"faust", "faust.types"}
"""What modules outside the seam may import of Faust: its documented API."""


def test_only_the_seam_imports_faust_s_internals() -> None:
    root = Path(__file__).resolve().parents[2]
    seam = root / "services" / "worker" / "faust_seam.py"
    reaches = [
        f"{path.relative_to(root)}: {module}"
        for package in ("services", "sagaline", "runtime", "faults")
        for path in sorted((root / package).rglob("*.py"))
        if path != seam
        for module in _imported(path)
        if module.split(".")[0] in ("faust", "mode") and module not in PUBLIC_FAUST
    ]
    assert reaches == []


def _imported(path: Path) -> list[str]:
    modules: list[str] = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            modules += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            modules.append(node.module)
    return modules


def test_the_worker_app_reads_no_read_offset_for_its_inputs_and_faust_s_for_changelogs(
    tmp_path: Path,
) -> None:
    settings = Settings(data_dir=tmp_path, store="memory")
    app, runners = create_app(settings, [CapacityLedger(name="inventory", entity_type="product")])
    consumer = app.consumer
    inputs = [t for r in runners for t in r.input_topics]
    assert inputs
    changelog = TP(f"{settings.app_id}-inventory-changelog", 0)
    for tp in (TP(inputs[0], 0), changelog):
        consumer._read_offset[tp] = 7  # as Faust's delivery loop and seeks set them
    # What the delivery loop reads (it binds __getitem__): an input's never filters.
    assert consumer._read_offset[TP(inputs[0], 0)] is None
    assert consumer._read_offset[changelog] == 7
    assert consumer._read_offset[TP("unknown", 3)] is None


NO_READS = ChangelogReads(lambda tp: None, lambda read: True)
"""Reads that stamped nothing: no record is stale."""


@dataclass(eq=False)
class StampableMessage:
    tp: TP
    offset: int


def _changelog_event(tp: TP, offset: int) -> Any:
    message = SimpleNamespace(tp=tp, offset=offset, key=b"k", value=b"v")
    return SimpleNamespace(message=message, key="k", value="v")


def test_a_record_of_a_partition_dropped_before_the_recovery_loop_reads_it_is_refused() -> None:
    # Defect 15: the loop's ``wait_for`` ran ``get`` as a task; the rebalance dropped the
    # standby partition before the loop looked at the record, which Faust then applied to
    # the table of the record before it.
    tp = TP("app-transfer-saga-state-changelog", 3)
    recovery = SimpleNamespace(active_tps=set(), standby_tps={tp})
    handed = faust_seam._HeldWhenRead(_changelog_event(tp, 38), recovery, NO_READS)
    recovery.standby_tps.clear()  # the rebalance, between get and the loop
    with pytest.raises(faust_seam.NoLongerHeld):
        handed.message  # noqa: B018  (the loop's first read)
    # The loop catches any Exception and goes on with the next record.
    assert issubclass(faust_seam.NoLongerHeld, Exception)


def test_a_record_whose_read_ends_before_the_recovery_loop_reads_it_is_refused() -> None:
    # Defect 16: the partition sought again between get and the loop's first look.
    tp = TP("app-order-saga-state-changelog", 3)
    recovery = SimpleNamespace(active_tps=set(), standby_tps={tp})
    partitions = Partitions()
    partitions.now[tp] = State()
    reads = partitions.reads()
    event = _changelog_event(tp, 1151)
    event.message = StampableMessage(tp, 1151)
    reads.drained({tp: [event.message]}, lambda tp: True)
    assert reads.hand_on(tp, event.message)
    handed = faust_seam._HeldWhenRead(event, recovery, reads)
    partitions.seek(tp)  # the standby's seek
    with pytest.raises(faust_seam.NoLongerHeld, match="sought again"):
        handed.message  # noqa: B018  (the loop's first read)


def test_a_record_held_when_the_loop_reads_it_is_the_event_to_every_later_reader() -> None:
    tp = TP("app-order-saga-state-changelog", 2)
    recovery = SimpleNamespace(active_tps={tp}, standby_tps=set())
    event = _changelog_event(tp, 867)
    handed = faust_seam._HeldWhenRead(event, recovery, NO_READS)
    assert handed.message is event.message
    recovery.active_tps.clear()  # later reads (the batch applied after a rebalance) pass
    assert (handed.message.offset, handed.key, handed.value) == (867, "k", "v")


def test_the_worker_s_consumer_runs_on_the_app_s_loop_unless_told_to_use_a_thread(
    tmp_path: Path,
) -> None:
    processes = [CapacityLedger(name="inventory", entity_type="product")]
    app, _ = create_app(Settings(data_dir=tmp_path, store="memory"), processes)
    on_loop: Any = app.consumer
    assert on_loop._thread.thread_loop is app.loop
    assert on_loop._thread.Worker is faust_seam.OnTheAppLoop
    threaded, _ = create_app(
        Settings(data_dir=tmp_path / "t", store="memory", consumer_thread=True), processes
    )
    in_thread: Any = threaded.consumer
    assert in_thread._thread.thread_loop is not threaded.loop
    assert in_thread._thread.Worker is not faust_seam.OnTheAppLoop


class _Probe(QueueServiceThread):
    started_in: int | None = None

    async def on_start(self) -> None:
        self.started_in = threading.get_ident()


def test_a_service_thread_on_the_app_loop_runs_there_and_leaves_other_tasks_alone() -> None:
    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        other = loop.create_task(asyncio.sleep(60))
        probe = _Probe(loop=loop, thread_loop=loop, Worker=faust_seam.OnTheAppLoop)
        await probe.start()
        assert probe.started_in == threading.get_ident()

        async def where() -> int:
            return threading.get_ident()

        assert await probe.call_thread(where) == threading.get_ident()
        await probe.stop()
        # The stop returns at the body's shutdown signal; the body's last steps follow.
        assert probe._thread is not None and probe._thread.task is not None
        await asyncio.wait_for(probe._thread.task, 5)
        assert not probe._thread.is_alive()
        assert not other.done()
        other.cancel()

    threads_before = threading.active_count()
    asyncio.run(asyncio.wait_for(scenario(), 10))
    assert threading.active_count() == threads_before


class _FailingStop(QueueServiceThread):
    async def on_thread_stop(self) -> None:
        raise RuntimeError("the client would not close")


def test_a_service_on_the_app_loop_that_fails_while_stopping_does_not_hold_its_stop() -> None:
    """mode's thread signals the shutdown when its body raises; so must the task, or the
    stop would wait its whole shutdown timeout (60 s) for a signal that never comes."""

    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        probe = _FailingStop(loop=loop, thread_loop=loop, Worker=faust_seam.OnTheAppLoop)
        await probe.start()
        await probe.stop()

    asyncio.run(asyncio.wait_for(scenario(), 10))


async def test_fausts_livelock_detector_judges_no_partition_of_the_worker() -> None:
    """Its checks (committed offsets, fetches and records timed from the worker's start)
    are wrong for the worker; its own check is services/worker/stalls.py."""
    from faust.transport.consumer import Consumer

    judged: list[TP] = []

    async def sleep(seconds: float) -> None:
        await asyncio.sleep(seconds)

    consumer = SimpleNamespace(
        assignment=lambda: {TP("t", 0), TP("t", 1)},
        sleep=sleep,
        should_stop=False,
        verify_event_path=lambda now, tp: judged.append(tp),
    )
    await faust_seam.FAUST_VERIFY_ALL(consumer)  # Faust's: every partition judged
    assert sorted(judged) == [TP("t", 0), TP("t", 1)]
    judged.clear()
    faust_seam.quiet_faust_livelock_detector()
    await Consumer.verify_all_partitions_active(consumer)  # type: ignore[arg-type]
    assert judged == []


def test_fausts_recovery_judges_no_changelog_partition_by_the_workers_start() -> None:
    from faust.transport.consumer import ThreadDelegateConsumer

    judged: list[TP] = []
    thread = SimpleNamespace(verify_recovery_event_path=lambda now, tp: judged.append(tp))
    consumer = SimpleNamespace(_thread=thread)
    faust_seam.FAUST_VERIFY_RECOVERY(consumer, 0.0, TP("t-changelog", 0))  # type: ignore[arg-type]
    assert judged == [TP("t-changelog", 0)]  # Faust's: the thread's check, from its start
    faust_seam.quiet_faust_livelock_detector()
    ThreadDelegateConsumer.verify_recovery_event_path(consumer, 0.0, TP("t-changelog", 1))  # type: ignore[arg-type]
    assert judged == [TP("t-changelog", 0)]


def test_refused_records_are_said_once_a_second_per_partition_with_a_count(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    drops = faust_seam._Drops()
    tp = TP("app-order-saga-state-changelog", 1)
    clock = iter([100.0, 100.2, 100.5, 101.1])
    monkeypatch.setattr(faust_seam.time, "monotonic", lambda: next(clock))
    with caplog.at_level(logging.INFO, logger=faust_seam.__name__):
        for offset in (565, 566, 567, 568):
            drops(SimpleNamespace(tp=tp, offset=offset), "no longer held here")
    assert [r.getMessage() for r in caplog.records] == [
        f"dropped 1 changelog record(s) of {tp}, the last at offset 565: no longer held here",
        f"dropped 3 changelog record(s) of {tp}, the last at offset 568: no longer held here",
    ]
