"""Capture real Debezium change events from the local pipeline into tests/fixtures/debezium/.

Needs the pipeline running: a PostgreSQL cluster with wal_level = logical holding the
`legacy` database (deploy/local/postgres.sh, deploy/local/legacy/school.sql), the broker
and the Kafka Connect worker with the Debezium plugin (deploy/local/connect.sh start).

What it does, in order:
1. empties the school tables and inserts one seed student, so a fresh connector's
   snapshot has exactly one row to read (``op: r``);
2. registers two capture connectors, copies of deploy/local/connect/legacy-school.json
   that differ only in name, slot, topic prefix and converter: ``legacyfx`` with
   ``schemas.enable=true`` (the schema/payload wrapper) and ``legacyfxplain`` with
   ``schemas.enable=false`` (the bare payload); waits for both snapshots;
3. runs the scenarios below, each in its own transaction(s), recording their txids;
4. reads every record of both prefixes (the three table topics and ``<prefix>.transaction``)
   and writes them verbatim (key and value as the exact strings on the wire, headers)
   to ``schemas-true.jsonl`` / ``schemas-false.jsonl``, and the txid of each scenario
   to ``scenarios.json``;
5. deletes both connectors, drops their replication slots and deletes their topics.

Run: ``.venv/bin/python -m scripts.capture_debezium_fixtures [--pg-port 55432]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
import urllib.request
from pathlib import Path
from typing import Any

import psycopg
from aiokafka import AIOKafkaConsumer
from aiokafka.admin import AIOKafkaAdminClient

ROOT = Path(__file__).resolve().parent.parent
CONNECTOR_JSON = ROOT / "deploy/local/connect/legacy-school.json"
OUT = ROOT / "tests/fixtures/debezium"
TABLES = ("student", "course", "student_course")

# Each scenario: a list of transactions, each a list of SQL statements.
SCENARIOS: dict[str, list[list[str]]] = {
    "enroll_one_transaction": [
        [
            "INSERT INTO school.student VALUES ('s-jhon', 'Jhon', 'jhon@school.test', 20)",
            "INSERT INTO school.course VALUES ('c-physics', 'Physics', 'Curie', 30, 5)",
            "INSERT INTO school.student_course VALUES ('s-jhon', 'c-physics')",
        ]
    ],
    "enroll_three_transactions": [
        ["INSERT INTO school.student VALUES ('s-ana', 'Ana', 'ana@school.test', 18)"],
        ["INSERT INTO school.course VALUES ('c-chem', 'Chemistry', 'Lavoisier', 25, 4)"],
        ["INSERT INTO school.student_course VALUES ('s-ana', 'c-chem')"],
    ],
    "enrollment_course_changed": [
        [
            "UPDATE school.student_course SET course_id = 'c-physics'"
            " WHERE student_id = 's-ana' AND course_id = 'c-chem'"
        ]
    ],
    "student_email_updated": [
        ["UPDATE school.student SET email = 'jhon.doe@school.test' WHERE id = 's-jhon'"]
    ],
    "course_capacity_updated": [["UPDATE school.course SET capacity = 35 WHERE id = 'c-physics'"]],
    "enrollment_dropped": [
        [
            "DELETE FROM school.student_course"
            " WHERE student_id = 's-jhon' AND course_id = 'c-physics'"
        ]
    ],
}
SEED = "INSERT INTO school.student VALUES ('s-seed', 'Seed', 'seed@school.test', 12)"
VARIANTS = {"legacyfx": "true", "legacyfxplain": "false"}


def rest(connect_url: str, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(
        connect_url + path, data=data, method=method, headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        raw = response.read()
    return json.loads(raw) if raw else None


def capture_config(prefix: str, schemas: str, pg_port: int) -> dict[str, str]:
    config: dict[str, str] = dict(json.loads(CONNECTOR_JSON.read_text())["config"])
    config.update(
        {
            "database.port": str(pg_port),
            "slot.name": f"sagaline_{prefix}",
            "topic.prefix": prefix,
            "key.converter.schemas.enable": schemas,
            "value.converter.schemas.enable": schemas,
        }
    )
    return config


def wait_running(connect_url: str, name: str, timeout_s: float = 90) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            status = rest(connect_url, "GET", f"/connectors/{name}/status")
        except OSError:
            status = None
        if status is not None:
            states = [status["connector"]["state"]] + [t["state"] for t in status["tasks"]]
            if "FAILED" in states:
                raise SystemExit(f"connector {name} failed: {json.dumps(status)}")
            if len(states) > 1 and all(s == "RUNNING" for s in states):
                return
        time.sleep(1)
    raise SystemExit(f"connector {name} not running after {timeout_s} s")


def run_sql(conn: psycopg.Connection[Any], statements: list[str]) -> int:
    """Run statements in one transaction; return its xid as Debezium reports it (32 bits)."""
    with conn.transaction(), conn.cursor() as cur:
        for statement in statements:
            cur.execute(statement)  # type: ignore[arg-type]  # fixed SQL of this script
        cur.execute("SELECT pg_current_xact_id()::text::bigint")
        row = cur.fetchone()
        assert row is not None
        return int(row[0]) % (1 << 32)


async def read_all(bootstrap: str, topics: list[str], idle_s: float = 5.0) -> list[dict[str, Any]]:
    consumer = AIOKafkaConsumer(
        *topics, bootstrap_servers=bootstrap, auto_offset_reset="earliest", enable_auto_commit=False
    )
    await consumer.start()
    records: list[dict[str, Any]] = []
    try:
        while True:
            batch = await consumer.getmany(timeout_ms=int(idle_s * 1000))
            if not batch:
                break
            for messages in batch.values():
                for m in messages:
                    records.append(
                        {
                            "topic": m.topic,
                            "partition": m.partition,
                            "offset": m.offset,
                            "timestamp": m.timestamp,
                            "key": None if m.key is None else m.key.decode(),
                            "value": None if m.value is None else m.value.decode(),
                            "headers": [[k, v.decode()] for k, v in (m.headers or ())],
                        }
                    )
    finally:
        await consumer.stop()
    records.sort(key=lambda r: (r["timestamp"], r["topic"], r["offset"]))
    return records


async def delete_topics(bootstrap: str, topics: list[str]) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        existing = set(await admin.list_topics())
        doomed = [t for t in topics if t in existing]
        if doomed:
            await admin.delete_topics(doomed)
    finally:
        await admin.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pg-port", type=int, default=55432)
    parser.add_argument("--bootstrap", default="127.0.0.1:9092")
    parser.add_argument("--connect-url", default="http://127.0.0.1:8083")
    args = parser.parse_args()
    run = str(int(time.time()))
    topics = [f"{p}.school.{t}" for p in VARIANTS for t in TABLES] + [
        f"{p}.transaction" for p in VARIANTS
    ]
    asyncio.run(delete_topics(args.bootstrap, topics))
    # The superuser logs in over the cluster's private unix socket only (deploy/local/postgres.sh).
    dsn = f"host={ROOT / '.local/pg/run'} port={args.pg_port} dbname=legacy user=postgres"
    with psycopg.connect(dsn, autocommit=True) as conn:
        for prefix in VARIANTS:  # slots left by an interrupted run
            conn.execute(
                "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots"
                " WHERE slot_name = %s AND NOT active",
                (f"sagaline_{prefix}",),
            )
        run_sql(conn, [f"DELETE FROM school.{t}" for t in reversed(TABLES)] + [SEED])
        # Unique connector names per run: Connect keeps a deleted connector's source
        # offsets, and a reused name would resume from them and skip the snapshot.
        names = {prefix: f"fixtures-{prefix}-{run}" for prefix in VARIANTS}
        try:
            for prefix, schemas in VARIANTS.items():
                config = capture_config(prefix, schemas, args.pg_port)
                rest(args.connect_url, "PUT", f"/connectors/{names[prefix]}/config", config)
            for name in names.values():
                wait_running(args.connect_url, name)
            time.sleep(5)  # snapshot done and streaming before the first scenario
            scenarios: dict[str, list[int]] = {"snapshot_seed": []}
            for scenario, transactions in SCENARIOS.items():
                scenarios[scenario] = [run_sql(conn, statements) for statements in transactions]
                time.sleep(1.5)  # distinct ts_ms and arrival order per scenario
            time.sleep(5)
            for prefix, schemas in VARIANTS.items():
                wanted = [t for t in topics if t.startswith(prefix + ".")]
                records = asyncio.run(read_all(args.bootstrap, wanted))
                path = OUT / f"schemas-{schemas}.jsonl"
                path.write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in records))
                print(f"{path.relative_to(ROOT)}: {len(records)} records")
            (OUT / "scenarios.json").write_text(json.dumps(scenarios, indent=2) + "\n")
        finally:
            for name in names.values():
                try:
                    rest(args.connect_url, "DELETE", f"/connectors/{name}")
                except OSError as error:
                    print(f"could not delete connector {name}: {error}")
            time.sleep(3)  # the task releases its slot
            for prefix in VARIANTS:
                conn.execute(
                    "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots"
                    " WHERE slot_name = %s",
                    (f"sagaline_{prefix}",),
                )
            asyncio.run(delete_topics(args.bootstrap, topics))


if __name__ == "__main__":
    main()
