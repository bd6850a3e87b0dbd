"""``sagaline replay``: decide the recorded history again with candidate definitions (the
working tree, or ``--definitions``), with changed settings (``--set``), and say what they
would have decided differently; exits 1 on any divergence, so CI can gate a change."""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import click

if TYPE_CHECKING:
    from runtime.settings import Settings


@click.command("replay")
@click.option(
    "--definitions",
    metavar="MODULE",
    help="A module providing processes(settings), as a domain does: its processes replace "
    "the working tree's of the same channel",
)
@click.option(
    "--set",
    "assignments",
    multiple=True,
    metavar="NAME=VALUE",
    help="Build the candidates with this setting changed (any Settings field, e.g. "
    "step_timeout_s=10); repeatable",
)
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON")
@click.option(
    "--spark",
    is_flag=True,
    help="Read and replay on Spark (SAGALINE_SPARK_MASTER: the rebuild's session and jars)",
)
def replay(
    definitions: str | None, assignments: tuple[str, ...], as_json: bool, spark: bool
) -> None:
    """Replay every recorded saga and participant key (the process topics and the event
    topic, earliest to the end offsets at the start) through the candidate definitions and
    compare each decision with the recorded one."""
    from runtime import tracing
    from runtime.settings import get_settings

    overrides = dict(_assignment(a) for a in assignments)
    settings = get_settings()
    with tracing.staged(tracing.configure(settings.tracing, "replay"), "replay") as stage:
        _replay(settings, definitions, overrides, as_json, spark, stage)


def _replay(
    settings: Settings,
    definitions: str | None,
    overrides: dict[str, str],
    as_json: bool,
    spark: bool,
    stage: Callable[[str], None],
) -> None:
    """The replay, each of its stages (choose, read, decide) a span with tracing on."""
    from runtime.kafka_security import KafkaUnreachable
    from sagaline.wiring import build_processes
    from sagas.catalog import PROCESS_CHANNELS
    from sagas.machinery.process import Process
    from sagas.machinery.replay import replay_all
    from services.replay.candidates import CandidateError, choose
    from services.replay.history import read_history
    from services.replay.report import render, summarize, to_json_text

    stage("choose")

    def every_process(settings: Settings) -> list[Process[Any]]:
        """Every channel's, the legacy CDC ones too: their topics hold history whether or
        not this machine's settings run them."""
        return build_processes(settings.model_copy(update={"cdc_enabled": True}))

    try:
        chosen = choose(settings, every_process, definitions, overrides)
    except CandidateError as exc:
        raise click.ClickException(str(exc)) from exc
    if spark:
        from sagaline.replay_spark import replay_on_spark
        from spark_projections.session import MissingJars

        stage("spark")
        try:
            result = replay_on_spark(settings, chosen.candidates, chosen.baselines)
        except MissingJars as exc:
            raise click.ClickException(str(exc)) from exc
        summary = summarize(result, chosen.baselines is not None)
        click.echo(to_json_text(summary) if as_json else render(summary))
        sys.exit(1 if summary.diverging else 0)
    started = time.perf_counter()
    stage("read")
    try:
        history = asyncio.run(read_history(settings, PROCESS_CHANNELS))
    except KafkaUnreachable as exc:
        raise click.ClickException(str(exc)) from exc
    read_s = time.perf_counter() - started
    stage("decide")
    result = replay_all(
        history.histories, chosen.candidates, history.recording, chosen.baselines, history.until
    )
    summary = summarize(result, chosen.baselines is not None)
    summary.notes.append(
        f"read {history.records} records in {read_s:.1f} s "
        f"({history.undecodable} undecodable: the worker dead-letters those); "
        f"replayed in {time.perf_counter() - started - read_s:.1f} s"
    )
    if history.facts_truncated:
        summary.notes.append(
            f"event topic partitions {list(history.facts_truncated)} lost older records: "
            "facts of the oldest decisions may show as missing"
        )
    click.echo(to_json_text(summary) if as_json else render(summary))
    sys.exit(1 if summary.diverging else 0)


def _assignment(text: str) -> tuple[str, str]:
    name, sep, value = text.partition("=")
    if not sep or not name:
        raise click.BadParameter(f"{text!r}: expected NAME=VALUE", param_hint="--set")
    return name.strip(), value
