"""The ``sagaline`` command line: topics, worker, projector, api, db, demo, keys, deadletters,
sagas."""

from __future__ import annotations

import asyncio
import logging
import sys
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, TypeVar

import click
from pydantic import ValidationError
from pydantic_settings import SettingsError

from runtime import gc_tuning
from runtime.settings import get_settings
from services import logsafe

T = TypeVar("T")

LOCAL_KEY = Path(".local/api-key")
"""The key `make run` creates and the demo sends (the API stores only its hash)."""


def _logging() -> None:
    from runtime.logformat import configure

    settings = get_settings()
    configure(settings.log_level, settings.log_format)
    # One line per HTTP request would bury the demo's and the components' own output.
    logging.getLogger("httpx").setLevel(logging.WARNING)


class Commands(click.Group):
    """Every command: a read-model database that cannot be reached ends it with one sentence
    (where, and what the driver said), not a traceback."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except Exception as exc:
            reason = _unreachable_database(exc)
            if reason is None:
                raise
            raise click.ClickException(reason) from None


def _unreachable_database(exc: Exception) -> str | None:
    operational = sys.modules.get("sqlalchemy.exc")  # loaded if a command used the database
    if operational is None or not isinstance(exc, operational.OperationalError):
        return None
    from readside.engine import unreachable
    from runtime.settings import masked_url

    url = get_settings().database_url
    return str(unreachable(masked_url(url), exc, sqlite=url.startswith("sqlite")))


@click.group(cls=Commands)
def main() -> None:
    """Sagaline: sagas over Kafka, and read models rebuilt from the event log."""
    logsafe.install()
    try:
        get_settings()
    except ValidationError as exc:  # a sentence per wrong setting, not a traceback
        problems = "; ".join(e["msg"].removeprefix("Value error, ") for e in exc.errors())
        raise click.ClickException(f"invalid settings: {problems}") from None
    except SettingsError as exc:  # a value that is not the JSON its setting takes
        raise click.ClickException(f"invalid settings: {exc} (it takes JSON)") from None


@main.group()
def topics() -> None:
    """Declare and check Kafka topics."""


@topics.command("create")
def topics_create() -> None:
    """Create every declared topic that does not exist yet (explicit partitions and retention),
    and set on the existing ones every declared config they hold otherwise (a line each says
    what changed: the changelogs' compaction settings, runtime/topics.py)."""
    from runtime.kafka_security import KafkaUnreachable
    from runtime.topics import TopicMismatch, correct_configs, create_topics, declared_topics

    settings = get_settings()
    try:
        created = asyncio.run(create_topics(settings))
        corrected = asyncio.run(correct_configs(settings))
    except (TopicMismatch, KafkaUnreachable) as exc:
        raise click.ClickException(str(exc)) from exc
    for spec in declared_topics(settings):
        mark = "created" if spec.name in created else "exists "
        click.echo(f"{mark} {spec.name} partitions={spec.partitions} {spec.config}")
    for line in corrected:
        click.echo(f"changed {line}")


@topics.command("check")
def topics_check() -> None:
    """Exit non-zero when a topic is missing or has another partition count than declared."""
    from runtime.kafka_security import KafkaUnreachable
    from runtime.topics import TopicMismatch, check_topics

    try:
        asyncio.run(check_topics(get_settings()))
    except (TopicMismatch, KafkaUnreachable) as exc:
        raise click.ClickException(str(exc)) from exc
    click.echo("all topics match their declarations")


@main.command()
def worker() -> None:
    """Run the Faust worker: the saga orchestrator and its participants."""
    import sagas.domains  # noqa: F401  (registers every domain's contracts)
    from runtime.kafka_security import KafkaUnreachable
    from runtime.logformat import dict_config
    from runtime.startup_wait import when_reachable
    from runtime.topics import TopicMismatch, check_topics
    from sagaline.wiring import build_processes
    from services.worker.bounded import BoundedWorker
    from services.worker.faust_app import create_app, store_before_stop
    from services.worker.stale_stores import judge_at_start

    _logging()  # until Faust configures its own: the wait for the broker speaks
    settings = get_settings()
    try:
        asyncio.run(when_reachable(settings.kafka_startup_wait_s, lambda: check_topics(settings)))
        # Stores that may have missed tombstones go before Faust opens any (the broker asked
        # here, not during a rebalance: services/worker/stale_stores.py).
        currency = asyncio.run(judge_at_start(settings)) if settings.store == "rocksdb" else None
    except (TopicMismatch, KafkaUnreachable) as exc:
        raise click.ClickException(f"refusing to start: {exc}") from exc
    app, runners = create_app(settings, build_processes(settings), currency=currency)
    gc_tuning.tune(settings.gc_threshold, settings.gc_freeze)
    sys.argv = [sys.argv[0], "worker", "--loglevel", settings.log_level.lower()]
    faust_worker = BoundedWorker(
        app,
        grace_s=settings.shutdown_grace_s,
        before_stop=lambda: store_before_stop(runners),
        loglevel=settings.log_level.lower(),
        logging_config=dict_config(settings.log_level, settings.log_format),
    )
    faust_worker.execute_from_commandline()


@main.command()
def api() -> None:
    """Run the REST API (uvicorn)."""
    from runtime.kafka_security import KafkaUnreachable
    from runtime.startup_wait import when_reachable
    from runtime.topics import broker_answers
    from services.api.app import create_api
    from services.api.server import serve, serve_workers

    settings = get_settings()
    _logging()
    try:  # before uvicorn, whose failed start prints a traceback
        asyncio.run(when_reachable(settings.kafka_startup_wait_s, lambda: broker_answers(settings)))
    except KafkaUnreachable as exc:
        raise click.ClickException(f"refusing to start: {exc}") from exc
    own_logging = settings.log_format == "json"
    if settings.api_workers > 1:
        serve_workers(settings, own_logging)  # each process tunes its own collector
    else:
        app = create_api(settings)
        gc_tuning.tune(settings.gc_threshold, settings.gc_freeze)
        serve(app, settings, own_logging)


@main.command()
def projector() -> None:
    """Run the projector: domain events -> read-model database, exactly once."""
    from services.projector.runner import ProjectorError, serve

    _logging()
    settings = get_settings()
    gc_tuning.tune(settings.gc_threshold, settings.gc_freeze)
    try:
        asyncio.run(serve(settings))
    except ProjectorError as exc:
        raise click.ClickException(f"refusing to start: {exc}") from exc


@main.group()
def db() -> None:
    """The read-model database."""


@db.command("upgrade")
@click.option("--revision", default="head", show_default=True, help="Alembic revision to reach")
def db_upgrade(revision: str) -> None:
    """Create or migrate the read-model schema (Alembic) at settings.database_url."""
    from readside.migrate import upgrade
    from runtime.settings import masked_url

    settings = get_settings()
    upgrade(settings.database_url_with_password(), revision)
    click.echo(f"read-model database at {masked_url(settings.database_url)} is at {revision}")


@db.command("revision")
@click.option("-m", "--message", required=True, help="What it changes (its file name's slug)")
def db_revision(message: str) -> None:
    """Write the next migration into migrations/versions/ and print its path: Alembic's
    autogenerate against every declared table (the read models, the kernel's, the Spark
    rebuild's), run on a scratch database, no server needed. It never drops a table; when
    the migrations already create everything declared it writes nothing and says so."""
    from readside.migrate import revision
    from sagaline.schema import DECLARED

    written = revision(message, DECLARED)
    for table in written.undeclared:
        click.echo(
            f"left table {table} alone: the migrations create it and no declaration holds "
            "it; write its drop by hand if that is meant",
            err=True,
        )
    if written.path is None:
        click.echo("nothing to do: the migrations already create the declared schema")
    else:
        click.echo(written.path)


@main.command()
@click.option("--url", default=None, help="Base URL of the API (default: from settings)")
@click.option("--timeout", default=60.0, help="Seconds to wait for the outcomes")
@click.option(
    "--key-file",
    type=click.Path(path_type=Path),
    default=LOCAL_KEY,
    show_default=True,
    help="File holding the API key the demo sends (`sagaline keys local` writes it)",
)
def demo(url: str | None, timeout: float, key_file: Path) -> None:
    """Place a few orders and run an enrollment story through the API; print how each
    saga ended."""
    from sagaline.demo import run_demo

    _logging()
    settings = get_settings()
    base = url or f"http://{settings.api_host}:{settings.api_port}"
    key = key_file.read_text().strip() if key_file.exists() else None
    ok = asyncio.run(run_demo(settings, base, timeout, key))
    if not ok:
        raise click.ClickException(
            "some sagas did not reach a final status in time, or the enrollment story "
            "did not end as told"
        )


@main.command()
@click.option(
    "--database-url", default=None, help="Read-model database to rebuild (default: settings)"
)
@click.option(
    "--until-now/--until-checkpoints",
    default=True,
    show_default=True,
    help="End at the topic's end offsets as the job starts, or at the projector's checkpoints",
)
def rebuild(database_url: str | None, until_now: bool) -> None:
    """Rebuild every read model from the event topic with Spark, then swap it in at once."""
    from spark_projections.guard import AlreadyRunning
    from spark_projections.job import NotMigrated
    from spark_projections.read import BrokerUnreachable, TopicMissing
    from spark_projections.session import MissingJars
    from spark_projections.stopping import run_bounded

    _logging()
    settings = get_settings()
    if database_url:
        settings = settings.model_copy(update={"database_url": database_url})
    try:
        run_bounded(settings, until_checkpoints=not until_now)
    except (AlreadyRunning, BrokerUnreachable, MissingJars, NotMigrated, TopicMissing) as exc:
        raise click.ClickException(str(exc)) from exc


@main.group()
def keys() -> None:
    """API keys in SAGALINE_API_KEYS_FILE: create, list, revoke (README, "API keys")."""


@keys.command("create")
@click.option(
    "--scope",
    "scopes",
    required=True,
    help="Comma-separated: commands (write routes), read (queries), admin (operations)",
)
@click.option("--label", default="", help="Free text to tell keys apart (who holds it, why)")
def keys_create(scopes: str, label: str) -> None:
    """Create a key, store its salted hash, print the key once (it is not kept anywhere)."""
    from services.keys import KeyFileError, add_key, parse_scopes

    path = get_settings().api_keys_file
    try:
        key, stored = add_key(path, parse_scopes(scopes), label)
    except KeyFileError as exc:
        raise click.ClickException(str(exc)) from exc
    click.echo(
        f"created key {stored.key_id} ({','.join(sorted(stored.scopes))}) in {path}", err=True
    )
    click.echo("the key follows; it is shown only now: give it to its client", err=True)
    click.echo(key)


@keys.command("list")
def keys_list() -> None:
    """Every key's id, scopes, creation time and label (never the key or its hash)."""
    from services.keys import KeyFileError, read_key_file

    path = get_settings().api_keys_file
    try:
        stored = read_key_file(path)
    except KeyFileError as exc:
        raise click.ClickException(str(exc)) from exc
    for key in stored:
        click.echo(f"{key.key_id}  {','.join(sorted(key.scopes)):22} {key.created}  {key.label}")
    if not stored:
        click.echo(f"no keys in {path}", err=True)


@keys.command("revoke")
@click.argument("key_id")
def keys_revoke(key_id: str) -> None:
    """Remove the key KEY_ID (or a unique prefix of it); a running API refuses it at once."""
    from services.keys import KeyFileError, revoke_key

    path = get_settings().api_keys_file
    try:
        removed = revoke_key(path, key_id)
    except KeyFileError as exc:
        raise click.ClickException(str(exc)) from exc
    click.echo(f"revoked key {removed.key_id} ({removed.label or 'no label'}) from {path}")


@keys.command("local")
@click.option("--key-file", type=click.Path(path_type=Path), default=LOCAL_KEY, show_default=True)
def keys_local(key_file: Path) -> None:
    """For `make run`: make sure KEY_FILE holds a key the API accepts (every scope), creating
    one if not, and print it."""
    from services.keys import ensure_local_key

    settings = get_settings()
    click.echo(ensure_local_key(key_file, settings.api_keys_file, settings.api_keys))


@main.group()
def deadletters() -> None:
    """Dead letters: list them, show one, re-drive one after its cause was fixed."""


@deadletters.command("list")
@click.option("--before", type=click.IntRange(min=0), help="Letters before this offset")
@click.option(
    "--limit",
    type=click.IntRange(1, 500),  # the bounds of SAGALINE_CONSOLE_DEADLETTERS_PAGE
    help="Letters on the page, at most 500 [default: SAGALINE_CONSOLE_DEADLETTERS_PAGE, "
    "the console's page]",
)
def deadletters_list(before: int | None, limit: int | None) -> None:
    """A page of letters, newest first: offset (what `show` and `redrive` take), state,
    when, source, stage, reason. The next page's command is said after it."""
    from runtime.topics import DEAD_LETTERS
    from services.deadletters import DeadLetterDesk, letter_page

    settings = get_settings()
    size = limit or settings.console_deadletters_page
    page, done = _kafka(letter_page(DeadLetterDesk(settings), settings, before, size))
    for letter in page.letters:
        body = letter.body
        source = letter.source if letter.named else "?"
        mark = "re-driven" if source in done else "parked   "
        reason = str(body.get("reason", ""))[:160]
        click.echo(
            f"{letter.letter_offset:>6}  {mark} {body.get('dead_lettered_at', '?')}  "
            f"{source}  {body.get('stage', '?')}: {reason}"
        )
    topic = settings.topic(DEAD_LETTERS)
    if not page.letters:
        kept = f" (it keeps offsets {page.first} and later)" if page.end > page.first else ""
        click.echo(f"no dead letters on {topic} before offset {page.before}{kept}", err=True)
    elif page.older is not None:
        more = "" if limit is None else f" --limit {limit}"
        click.echo(
            f"older letters: sagaline deadletters list --before {page.older}{more}", err=True
        )


@deadletters.command("show")
@click.argument("letter_offset", type=int)
def deadletters_show(letter_offset: int) -> None:
    """The whole letter at LETTER_OFFSET (JSON), and whether it was re-driven."""
    import json

    from services.deadletters import DeadLetterDesk, RedriveRefused, one_letter

    settings = get_settings()
    try:
        letter, done = _kafka(one_letter(DeadLetterDesk(settings), settings, letter_offset))
    except RedriveRefused as exc:
        raise click.ClickException(str(exc)) from exc
    click.echo(json.dumps({**letter.body, "redriven": done}, indent=2))


@deadletters.command("redrive")
@click.argument("letter_offset", type=int)
@click.option("--force", is_flag=True, help="Send it again even though it was re-driven before")
def deadletters_redrive(letter_offset: int, force: bool) -> None:
    """Send the original record of the letter at LETTER_OFFSET back to its source topic and
    partition (same key, same bytes: dedupe by message id still holds), when that topic is
    one of Sagaline's process channels. Fix the cause first."""
    from runtime import tracing
    from services.deadletters import DeadLetterDesk, RedriveRefused, redrive

    settings = get_settings()
    tracing.configure(settings.tracing, "cli")  # the re-sent record: a send span, headers
    try:
        done = _kafka(redrive(DeadLetterDesk(settings), settings, letter_offset, force=force))
    except RedriveRefused as exc:
        raise click.ClickException(str(exc)) from exc
    again = " again (forced)" if done.forced else ""
    click.echo(f"re-drove {done.source}{again} to partition {done.partition} offset {done.offset}")


@main.group()
def sagas() -> None:
    """Sagas in the read model: list them by a filter (as the console's list), show one."""


_FILTERS = (
    ("saga-type", "Only sagas of this type (order, enrollment)"),
    ("status", "Only sagas in this status (the step they are at)"),
    ("outcome", "in_flight, stuck, finished, compensated or failed"),
    ("version", "Only sagas on this version of their definition (1: from before versions)"),
    ("since", "Changed at or after this time (ISO 8601; UTC without a zone)"),
    ("until", "Changed before this time"),
    ("customer", "An order's customer id"),
    ("student", "An enrollment's student id"),
    ("course", "An enrollment's course id"),
    ("product", "Sagas that touched this product"),
    ("entity", "Sagas whose timeline holds this entity key (payment:o-1)"),
    ("after", "The cursor the previous page printed"),
    ("limit", "Sagas on the page, 1 to 500 [default: 50]"),
)


def _filter_options(command: Any) -> Any:
    for name, text in reversed(_FILTERS):
        command = click.option(f"--{name}", help=text)(command)
    return command


def _read_engine() -> Any:
    from readside.engine import create_read_engine

    return create_read_engine(get_settings().database_url_with_password())


def _read(query: Any, *args: Any) -> Any:
    """Run a read-model query; a database problem is a sentence, not a traceback."""
    from sqlalchemy.exc import SQLAlchemyError

    engine = _read_engine()
    try:
        with engine.connect() as conn:
            return query(conn, *args)
    except SQLAlchemyError as exc:
        raise click.ClickException(
            f"the read-model database is unavailable ({type(exc).__name__}): "
            "is it running and migrated (`sagaline db upgrade`)?"
        ) from exc
    finally:
        engine.dispose()


@sagas.command("list")
@_filter_options
@click.option("--json", "as_json", is_flag=True, help="One JSON document, as GET /sagas answers")
def sagas_list(as_json: bool, **options: str | None) -> None:
    """A page of sagas, most recently changed first, filtered as the console's list
    (/console/sagas) and GET /sagas are: id, type, version, status, outcome, changed, reason. The
    next page's command is said after it."""
    import shlex
    from datetime import UTC, datetime

    from services.api import saga_list

    settings = get_settings()
    given = {k: v for k, v in options.items() if v is not None}
    try:
        wanted = saga_list.parse(given)
    except saga_list.FilterError as exc:
        raise click.ClickException(str(exc)) from exc
    page = _read(saga_list.list_sagas, wanted, datetime.now(UTC), settings.step_timeout_s)
    if as_json:
        click.echo(saga_list.SagaListPublic.of(page).model_dump_json(indent=2))
        return
    for s in page.sagas:
        stuck = s.outcome == "in_flight" and s.updated_at < page.stuck_before
        outcome = "stuck" if stuck else s.outcome
        click.echo(
            f"{s.saga_id}  {s.saga_type:<10} v{s.version:<3} {s.status:<12} {outcome:<11} "
            f"{s.updated_at.isoformat(timespec='milliseconds')}  {s.reason or ''}".rstrip()
        )
    if not page.sagas:
        click.echo("no saga matches", err=True)
    elif page.next is not None:
        again = " ".join(
            f"--{k.replace('_', '-')} {shlex.quote(v)}" for k, v in wanted.query().items()
        )
        more = f"{again} " if again else ""
        click.echo(f"next page: sagaline sagas list {more}--after {page.next.encode()}", err=True)


@sagas.command("show")
@click.argument("saga_id")
def sagas_show(saga_id: str) -> None:
    """A saga's status and reason, the participants it touched, and its timeline (oldest
    first; compensations marked), as the console's saga page shows them."""
    from services.api.console import charts, data

    page = _read(data.saga_page, saga_id)
    if page is None:
        raise click.ClickException(f"no saga {saga_id!r} is projected (yet)")
    kind = page.saga.entity_type if page.saga else "saga"
    click.echo(
        f"{kind} {saga_id}: {page.status or 'not projected yet'}{' (final)' if page.final else ''}"
    )
    if page.reason:
        click.echo(f"reason: {page.reason}")
    lanes = charts.lanes(page.steps, page.saga.entity_type if page.saga else None)
    click.echo(
        "participants: "
        + ", ".join(
            f"{lane.name} ({', '.join(lane.entities)})" if lane.entities else lane.name
            for lane in lanes
        )
    )
    for i, step in enumerate(page.steps, 1):
        mark = "COMPENSATION " if step.compensation else ""
        since = (
            "" if step.since_previous is None else f" +{step.since_previous.total_seconds():.3f}s"
        )
        click.echo(
            f"{i:>4}  {step.at.isoformat(timespec='milliseconds')}{since}  "
            f"{step.entity_key}  {step.event_type}  {mark}{step.summary}"
        )


def _kafka(work: Coroutine[Any, Any, T]) -> T:
    """Run a Kafka coroutine; an unreachable broker is a sentence, not a traceback."""
    from runtime.kafka_security import KafkaUnreachable

    try:
        return asyncio.run(work)
    except KafkaUnreachable as exc:
        raise click.ClickException(str(exc)) from exc


main.add_command(__import__("sagaline.replay", fromlist=["replay"]).replay)
main.add_command(__import__("sagaline.versions", fromlist=["versions"]).versions)


from sagaline import operator_cli as _operator_cli  # noqa: E402, F401  (sagas cancel|compensate)

if __name__ == "__main__":
    main()
