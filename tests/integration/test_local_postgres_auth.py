"""The local PostgreSQL (deploy/local/postgres.sh) lets no one in without a password (issue
24): over TCP every role logs in with scram-sha-256 and the password generated into
.local/pg/pgpass, the superuser not at all; `trust` holds only on the unix socket, in a
directory only the cluster's OS user may enter. A cluster made by the earlier script (trust
for every TCP connection) is switched over by the next start, running or stopped. Kafka
Connect's REST API shows the connector's password as a reference, never the password.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import stat
import subprocess
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from faults.stack import local_pg_url

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
LOCAL = ROOT / ".local"
SCRIPTS = ROOT / "deploy" / "local"
TRUST_HBA = """\
local   all             all                                     trust
host    all             all             127.0.0.1/32            trust
host    all             all             ::1/128                 trust
local   replication     all                                     trust
host    replication     all             127.0.0.1/32            trust
host    replication     all             ::1/128                 trust
"""
"""What `initdb --auth=trust` wrote for the earlier postgres.sh."""


def pgpass(base: Path) -> dict[str, tuple[int, str]]:
    """Role -> (port, password) from a cluster's password file (127.0.0.1 lines)."""
    roles: dict[str, tuple[int, str]] = {}
    for line in (base / "pgpass").read_text().splitlines():
        fields = line.split(":")
        if len(fields) == 5 and fields[0] == "127.0.0.1":
            roles[fields[3]] = (int(fields[1]), fields[4])
    return roles


def login(port: int, user: str, password: str | None, dbname: str = "postgres") -> str:
    """current_user of a TCP login; raises psycopg.OperationalError when refused. No password
    file or environment variable of the caller's can supply one."""
    with psycopg.connect(
        host="127.0.0.1",
        port=port,
        user=user,
        dbname=dbname,
        password=password,
        passfile=os.devnull,
        connect_timeout=10,
    ) as conn:
        row = conn.execute("SELECT current_user").fetchone()
        assert row is not None
        return str(row[0])


def refused(port: int, user: str, password: str | None) -> str:
    with pytest.raises(psycopg.OperationalError) as refusal:
        login(port, user, password)
    return str(refusal.value)


def assert_locked_down(base: Path, port: int) -> None:
    """What must hold of any cluster postgres.sh started."""
    roles = pgpass(base)
    sagaline = roles["sagaline"][1]
    assert roles["sagaline"][0] == port and len(sagaline) == 48
    assert "no password supplied" in refused(port, "sagaline", None)
    assert "password authentication failed" in refused(port, "sagaline", "sagaline")
    assert "password authentication failed" in refused(port, "debezium", "debezium")
    assert "rejects connection" in refused(port, "postgres", None)
    assert login(port, "sagaline", sagaline, "sagaline") == "sagaline"
    assert login(port, "debezium", roles["debezium"][1]) == "debezium"
    run_dir, data_dir = base / "run", base / "data"
    assert stat.S_IMODE(run_dir.stat().st_mode) == 0o700, "the socket directory is private"
    assert run_dir.stat().st_uid == data_dir.stat().st_uid, "owned by the cluster's OS user"
    assert not {p.name for p in run_dir.iterdir()} - {f".s.PGSQL.{port}", f".s.PGSQL.{port}.lock"}
    assert stat.S_IMODE((base / "pgpass").stat().st_mode) == 0o600
    assert (base / "pgpass").stat().st_uid == os.geteuid()


def test_the_shared_cluster_takes_passwords_over_tcp_only_and_keeps_its_socket_private() -> None:
    """The server `make test` started: its TCP logins, socket directory and live rules."""
    base = (LOCAL / "pg").resolve()
    port = pgpass(base)["sagaline"][0]
    assert_locked_down(base, port)
    # The rules the server reads: trust on the socket only, nothing but scram or reject on TCP.
    with psycopg.connect(host=str(base / "run"), port=port, user="postgres") as conn:
        rules = conn.execute("SELECT type, auth_method FROM pg_hba_file_rules").fetchall()
        assert conn.execute("SHOW password_encryption").fetchone() == ("scram-sha-256",)
    assert {m for t, m in rules if t == "local"} == {"trust"}
    assert {m for t, m in rules if t != "local"} == {"scram-sha-256", "reject"}
    # What the tests, faults/ and benchmarks/ connect with works.
    with psycopg.connect(local_pg_url().replace("+psycopg", "")) as conn:
        assert conn.execute("SELECT current_user").fetchone() == ("sagaline",)


def test_the_legacy_database_url_default_reads_the_password_file() -> None:
    """SAGALINE_LEGACY_DATABASE_URL's default: no password in it, libpq's passfile= names
    .local/pg/pgpass (relative: the tests run from the repository)."""
    from sqlalchemy import create_engine, text

    from runtime.settings import Settings

    url = Settings.model_fields["legacy_database_url"].default
    assert ":sagaline@" not in url and "passfile=.local/pg/pgpass" in url
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            assert conn.execute(text("SELECT current_database()")).scalar() == "legacy"
    finally:
        engine.dispose()


def test_kafka_connect_shows_a_reference_not_the_password() -> None:
    started = subprocess.run(
        [str(SCRIPTS / "connect.sh"), "start"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert started.returncode == 0, started.stderr[-3000:]
    port = os.environ.get("SAGALINE_CONNECT_PORT", "8083")  # connect.sh's own default
    with urllib.request.urlopen(
        f"http://127.0.0.1:{port}/connectors/legacy-school/config", timeout=30
    ) as response:
        body = response.read().decode()
    assert json.loads(body)["database.password"] == "${env:SAGALINE_DEBEZIUM_PASSWORD}"
    assert pgpass((LOCAL / "pg").resolve())["debezium"][1] not in body


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def own_checkout() -> Iterator[tuple[Path, dict[str, str]]]:
    """A copy of the scripts in a directory of its own under .local/ (so the `postgres` OS
    user can traverse it, as the real one): its own cluster on its own port."""
    root = LOCAL / f"test-pg-{uuid.uuid4().hex[:8]}"
    (root / "deploy" / "local").mkdir(parents=True)
    for script in ("postgres.sh", "common.sh"):
        shutil.copy2(SCRIPTS / script, root / "deploy" / "local" / script)
    env = dict(os.environ, SAGALINE_PG_PORT=str(free_port()))
    try:
        yield root, env
    finally:
        subprocess.run(
            [str(root / "deploy/local/postgres.sh"), "reset"], env=env, capture_output=True
        )
        shutil.rmtree(root, ignore_errors=True)


def postgres_sh(root: Path, env: dict[str, str], *args: str) -> str:
    done = subprocess.run(
        [str(root / "deploy/local/postgres.sh"), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stderr


def make_it_old(root: Path, env: dict[str, str]) -> None:
    """Turn the cluster into what the earlier script left: initdb's trust rules, no password
    file, the old fixed password on `sagaline`."""
    base = root / ".local" / "pg"
    (base / "data" / "pg_hba.conf").write_text(TRUST_HBA)  # keeps the file's owner
    (base / "pgpass").unlink()
    postgres_sh(root, env, "admin", "-c", "ALTER ROLE sagaline PASSWORD 'sagaline'")
    postgres_sh(root, env, "admin", "-c", "SELECT pg_reload_conf()")


def test_a_cluster_made_with_trust_is_switched_over_running_or_stopped(
    own_checkout: tuple[Path, dict[str, str]],
) -> None:
    root, env = own_checkout
    port = int(env["SAGALINE_PG_PORT"])
    base = root / ".local" / "pg"
    first = postgres_sh(root, env, "start")
    assert "generated password(s) for sagaline debezium" in first
    assert "trusted every TCP connection" not in first  # a new cluster has nothing to switch
    assert_locked_down(base, port)

    # Running: the next start switches it live (a reload), and says so.
    make_it_old(root, env)
    assert login(port, "sagaline", None, "sagaline") == "sagaline"  # trust: no password asked
    switched = postgres_sh(root, env, "start")
    assert "trusted every TCP connection" in switched and "reloaded" in switched
    assert_locked_down(base, port)

    # Stopped: the start that brings it up switches it first.
    make_it_old(root, env)
    postgres_sh(root, env, "stop")
    switched = postgres_sh(root, env, "start")
    assert "trusted every TCP connection" in switched and "starting on" in switched
    assert_locked_down(base, port)

    # And a start with nothing to switch keeps the passwords it generated.
    before = pgpass(base)
    again = postgres_sh(root, env, "start")
    assert "trusted" not in again and "generated" not in again
    assert pgpass(base) == before
    assert_locked_down(base, port)
