"""Starting before the broker or the database is up (runtime/startup_wait.py,
readside/engine.py): silence is waited out for the configured time, a refusal is not, and a
stop ends the wait."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from sqlalchemy import Engine, create_engine
from sqlalchemy.exc import OperationalError

from readside.engine import DatabaseUnreachable, answering
from readside.migrate import is_migrated
from runtime import startup_wait
from runtime.kafka_security import KafkaUnreachable, unreachable
from runtime.settings import Settings
from runtime.startup_wait import when_reachable


@pytest.fixture(autouse=True)
def short_pauses(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(startup_wait, "FIRST_PAUSE_S", 0.01)
    monkeypatch.setattr(startup_wait, "LONGEST_PAUSE_S", 0.02)


class Attempts:
    """A start that fails with ``errors`` in turn, then returns how many attempts it took."""

    def __init__(self, *errors: KafkaUnreachable) -> None:
        self.errors = list(errors)
        self.made = 0

    async def __call__(self) -> int:
        self.made += 1
        if self.errors:
            raise self.errors.pop(0)
        return self.made


def silent() -> KafkaUnreachable:
    return KafkaUnreachable("cannot use Kafka at b:9092: refused", silent=True)


async def test_silence_is_waited_out_until_the_broker_answers() -> None:
    start = Attempts(silent(), silent(), silent())
    assert await when_reachable(30, start) == 4


async def test_a_refusal_ends_the_start_at_once() -> None:
    refused = KafkaUnreachable("cannot use Kafka at b:9092: wrong password", silent=False)
    start = Attempts(refused, silent())
    with pytest.raises(KafkaUnreachable, match="wrong password"):
        await when_reachable(30, start)
    assert start.made == 1


async def test_the_wait_ends_at_its_limit_with_the_last_reason() -> None:
    start = Attempts(*[silent() for _ in range(10_000)])
    began = time.monotonic()
    with pytest.raises(KafkaUnreachable, match="refused"):
        await when_reachable(0.3, start)
    assert 0.3 <= time.monotonic() - began < 2
    assert start.made > 2


async def test_no_wait_configured_exits_at_once() -> None:
    start = Attempts(silent(), silent())
    with pytest.raises(KafkaUnreachable):
        await when_reachable(0, start)
    assert start.made == 1


async def test_a_stop_ends_the_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(startup_wait, "FIRST_PAUSE_S", 30.0)
    monkeypatch.setattr(startup_wait, "LONGEST_PAUSE_S", 30.0)
    stop = asyncio.Event()
    start = Attempts(*[silent() for _ in range(10)])
    asyncio.get_running_loop().call_later(0.1, stop.set)
    began = time.monotonic()
    with pytest.raises(KafkaUnreachable):
        await when_reachable(60, start, stop)
    assert time.monotonic() - began < 5
    assert start.made == 1


async def test_nothing_listening_is_silence() -> None:
    exc = await unreachable(Settings(kafka_bootstrap="127.0.0.1:1"), RuntimeError("bootstrap"))
    assert exc.silent
    assert "ConnectionRefusedError" in str(exc)


async def test_a_server_that_answers_but_is_no_broker_is_a_refusal() -> None:
    async def not_kafka(_: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b"HTTP/1.1 400 Bad Request\r\n\r\n")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(not_kafka, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    async with server:
        exc = await unreachable(Settings(kafka_bootstrap=f"127.0.0.1:{port}"), RuntimeError("x"))
    assert not exc.silent
    assert "KafkaConnectionError" in str(exc)


def failing(reason: str) -> Callable[[Engine], bool]:
    """A probe whose connection fails with the driver's ``reason``."""

    def probe(engine: Engine) -> bool:
        raise OperationalError("SELECT 1", {}, Exception(reason))

    return probe


POSTGRES = create_engine("postgresql+psycopg://sagaline:secret@db.example:5432/sagaline")


@pytest.mark.parametrize(
    ("reason", "silent"),
    [
        (
            'connection failed: connection to server at "10.0.0.5", port 5432 failed: '
            "Connection refused",
            True,
        ),
        ("failed to resolve host 'db.example': [Errno -2] Name or service not known", True),
        ("connection failed: ... FATAL:  the database system is starting up", True),
        (
            'connection failed: ... FATAL:  password authentication failed for user "sagaline"',
            False,
        ),
        ('connection failed: ... FATAL:  database "sagaline" does not exist', False),
    ],
)
def test_a_database_that_does_not_answer_is_waited_for_and_one_that_refuses_is_not(
    reason: str, silent: bool
) -> None:
    with pytest.raises(DatabaseUnreachable) as raised:
        answering(POSTGRES, failing(reason))
    assert raised.value.silent is silent
    assert str(raised.value).startswith(
        "cannot use the read-model database at "
        "postgresql+psycopg://sagaline:***@db.example:5432/sagaline: "
    )
    assert raised.value.WAIT_SETTING == "SAGALINE_DATABASE_STARTUP_WAIT_S"


def test_sqlite_s_file_opens_or_will_not_so_it_is_not_waited_for(tmp_path: Path) -> None:
    engine = create_engine(f"sqlite:///{tmp_path / 'missing' / 'read.db'}")
    with pytest.raises(DatabaseUnreachable) as raised:
        answering(engine, is_migrated)
    assert not raised.value.silent


def test_a_database_that_answers_gives_the_probe_s_result(tmp_path: Path) -> None:
    engine = create_engine(f"sqlite:///{tmp_path / 'read.db'}")
    assert answering(engine, is_migrated) is False  # answers; no schema yet


async def test_the_client_s_own_line_per_unreachable_server_is_left_to_the_wait(
    caplog: pytest.LogCaptureFixture,
) -> None:
    client_log = logging.getLogger("aiokafka")
    attempts = Attempts(silent())

    async def start() -> int:
        client_log.error('Unable connect to "%s:%s": %s', "127.0.0.1", 1, "refused")
        client_log.error("Unable connect to node with id %s: %s", 1, "refused")  # a member
        return await attempts()

    with caplog.at_level(logging.INFO):
        assert await when_reachable(30, start) == 2
        client_log.error('Unable connect to "%s:%s": %s', "127.0.0.1", 1, "later")
    lines = [r.getMessage() for r in caplog.records]
    assert [line for line in lines if line.startswith('Unable connect to "')] == [
        'Unable connect to "127.0.0.1:1": later'  # after the start, aiokafka speaks again
    ]
    assert lines.count("Unable connect to node with id 1: refused") == 2
    assert any("trying again in" in line for line in lines)
