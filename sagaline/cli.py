"""The ``sagaline`` command line: topics, worker, projector, api, db, demo."""

from __future__ import annotations

import asyncio
import logging
import sys

import click

from runtime.settings import get_settings


def _logging() -> None:
    logging.basicConfig(
        level=get_settings().log_level,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    # One line per HTTP request would bury the demo's and the components' own output.
    logging.getLogger("httpx").setLevel(logging.WARNING)


@click.group()
def main() -> None:
    """Sagaline: sagas over Kafka, and read models rebuilt from the event log."""


@main.group()
def topics() -> None:
    """Declare and check Kafka topics."""


@topics.command("create")
def topics_create() -> None:
    """Create every declared topic that does not exist yet (explicit partitions and retention)."""
    from runtime.topics import TopicMismatch, create_topics, declared_topics

    settings = get_settings()
    try:
        created = asyncio.run(create_topics(settings))
    except TopicMismatch as exc:
        raise click.ClickException(str(exc)) from exc
    for spec in declared_topics(settings):
        mark = "created" if spec.name in created else "exists "
        click.echo(f"{mark} {spec.name} partitions={spec.partitions} {spec.config}")


@topics.command("check")
def topics_check() -> None:
    """Exit non-zero when a topic is missing or has another partition count than declared."""
    from runtime.topics import TopicMismatch, check_topics

    try:
        asyncio.run(check_topics(get_settings()))
    except TopicMismatch as exc:
        raise click.ClickException(str(exc)) from exc
    click.echo("all topics match their declarations")


@main.command()
def worker() -> None:
    """Run the Faust worker: the saga orchestrator and its participants."""
    import sagas.contracts  # noqa: F401
    from runtime.topics import TopicMismatch, check_topics
    from sagaline.wiring import build_processes
    from services.worker.bounded import BoundedWorker
    from services.worker.faust_app import create_app

    settings = get_settings()
    try:
        asyncio.run(check_topics(settings))
    except TopicMismatch as exc:
        raise click.ClickException(f"refusing to start: {exc}") from exc
    app, _ = create_app(settings, build_processes(settings))
    sys.argv = [sys.argv[0], "worker", "--loglevel", settings.log_level.lower()]
    faust_worker = BoundedWorker(
        app, grace_s=settings.shutdown_grace_s, loglevel=settings.log_level.lower()
    )
    faust_worker.execute_from_commandline()


@main.command()
def api() -> None:
    """Run the REST API (uvicorn)."""
    from services.api.app import create_api
    from services.api.server import serve

    settings = get_settings()
    _logging()
    serve(create_api(settings), settings.api_host, settings.api_port, settings.shutdown_grace_s)


@main.command()
def projector() -> None:
    """Run the projector: domain events -> read-model database, exactly once."""
    from services.projector.runner import ProjectorError, serve

    _logging()
    try:
        asyncio.run(serve(get_settings()))
    except ProjectorError as exc:
        raise click.ClickException(f"refusing to start: {exc}") from exc


@main.group()
def db() -> None:
    """The read-model database."""


@db.command("upgrade")
@click.option("--revision", default="head", show_default=True, help="Alembic revision to reach")
def db_upgrade(revision: str) -> None:
    """Create or migrate the read-model schema (Alembic) at settings.database_url."""
    from sqlalchemy.engine import make_url

    from readside.migrate import upgrade

    url = get_settings().database_url
    upgrade(url, revision)
    click.echo(f"read-model database at {make_url(url).render_as_string()} is at {revision}")


@main.command()
@click.option("--url", default=None, help="Base URL of the API (default: from settings)")
@click.option("--timeout", default=60.0, help="Seconds to wait for the outcomes")
def demo(url: str | None, timeout: float) -> None:
    """Place a few orders and run an enrollment story through the API; print how each
    saga ended."""
    from sagaline.demo import run_demo

    _logging()
    settings = get_settings()
    base = url or f"http://{settings.api_host}:{settings.api_port}"
    ok = asyncio.run(run_demo(settings, base, timeout))
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


if __name__ == "__main__":
    main()
