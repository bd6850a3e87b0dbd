"""``sagaline versions``: the saga instances in flight by type and version, read from the
worker's tables, and whether each older version can be deleted yet."""

from __future__ import annotations

import asyncio

import click


@click.command("versions")
def versions() -> None:
    """Count every channel's records in flight by the version that started them (from the
    table changelogs) and say which older versions can be deleted (none in flight)."""
    from runtime.kafka_security import KafkaUnreachable
    from runtime.settings import get_settings
    from sagaline.wiring import build_processes
    from services.inflight import count, read_changelog

    settings = get_settings()
    sagas = [p for p in build_processes(settings) if hasattr(p, "STATUSES") or hasattr(p, "newest")]
    try:
        for process in sagas:
            table = asyncio.run(read_changelog(settings, process.name))
            for line in count(process, table).lines():
                click.echo(line)
    except KafkaUnreachable as exc:
        raise click.ClickException(str(exc)) from exc
