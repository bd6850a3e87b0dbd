"""``sagaline sagas cancel|compensate``: an operator's action from the command line, as the
console and ``POST /cancellations|compensations`` do it (services/operator/actions.py): a
recorded dry run first, printed; then, confirmed, its execution with its progress;
``--action`` resumes one.

Registered on the ``sagas`` group by one line in sagaline/cli.py.
"""

from __future__ import annotations

import asyncio
import getpass
from datetime import UTC, datetime
from typing import Any

import click

from runtime.settings import get_settings
from sagaline import cli
from sagaline.cli import _filter_options, sagas


def _who() -> str:
    return f"cli:{getpass.getuser()}"


def _print(action: Any) -> None:
    click.echo(
        f"action {action.action_id}: {action.kind} {action.filter} by {action.requested_by} "
        f"at {action.requested_at.isoformat(timespec='seconds')}: {action.state}, "
        f"{action.sent}/{action.planned} done"
    )
    for t in action.sagas:
        ends = t.plan["settles_in"] or "decided by the saga"
        done = f"  [{t.outcome}]" if t.outcome else ""
        click.echo(f"  {t.saga_id}  {t.saga_type:<10} {t.status:<12} -> {ends}{done}")
        for c in t.plan["commands"]:
            click.echo(f"      {c['line']}")
        if t.plan["note"]:
            click.echo(f"      note: {t.plan['note']}")


def _plan(kind: str, given: dict[str, str], reason: str) -> Any:
    from services.operator import actions
    from services.operator.cancels import NotCancellable
    from services.operator.definitions import definitions

    settings = get_settings()

    def plan(conn: Any) -> Any:
        return actions.dry_run(
            conn, definitions(settings), kind, given, reason, _who(), datetime.now(UTC),
            settings.step_timeout_s,
        )  # fmt: skip

    try:
        return cli._read(plan)
    except (actions.ActionError, NotCancellable) as exc:
        raise click.ClickException(str(exc)) from exc


def _bus() -> Any:
    from runtime import tracing
    from services.bus import CommandBus

    settings = get_settings()
    tracing.configure(settings.tracing, "cli")  # the cancels it sends: send spans, headers
    return CommandBus(settings)


def _execute(action_id: str) -> Any:
    from services.operator import actions
    from services.operator.definitions import definitions

    settings = get_settings()

    async def run() -> Any:
        engine = cli._read_engine()
        bus = _bus()
        await bus.start()
        try:

            async def progress(done: int) -> None:
                click.echo(f"  {done} done", err=True)

            return await actions.execute(
                engine, bus, definitions(settings), action_id, _who(), after_batch=progress
            )
        finally:
            await bus.stop()
            engine.dispose()

    try:
        return asyncio.run(run())
    except actions.ActionError as exc:
        raise click.ClickException(str(exc)) from exc


def _act(kind: str, given: dict[str, str], reason: str, dry_run: bool, yes: bool) -> None:
    action = _plan(kind, given, reason)
    _print(action)
    if dry_run or not action.sagas:
        if action.sagas:
            click.echo(f"to run it: sagaline sagas compensate --action {action.action_id}")
        return
    if not yes and not click.confirm(f"send the cancel of these {action.planned} saga(s)?"):
        click.echo(f"not sent; later: sagaline sagas compensate --action {action.action_id}")
        return
    _print(_execute(action.action_id))


@sagas.command("cancel")
@click.argument("saga_id")
@click.option("--reason", required=True, help="Why: sent to the saga as its reason")
@click.option("--dry-run", is_flag=True, help="Record and print the plan only; send nothing")
@click.option("--yes", is_flag=True, help="Send without asking")
def sagas_cancel(saga_id: str, reason: str, dry_run: bool, yes: bool) -> None:
    """Cancel one saga: the compensations its definition sends (printed first), recorded
    as an action shown on the saga's page."""
    _act("cancel", {"saga_id": saga_id}, reason, dry_run, yes)


@sagas.command("compensate")
@_filter_options
@click.option("--reason", help="Why: sent to every saga as its reason")
@click.option("--dry-run", is_flag=True, help="Record and print the plan only; send nothing")
@click.option("--yes", is_flag=True, help="Send without asking")
@click.option("--action", "action_id", help="Run (or resume) this recorded dry run")
def sagas_compensate(
    reason: str | None, dry_run: bool, yes: bool, action_id: str | None, **options: str | None
) -> None:
    """Cancel every saga a filter matches (the saga list's filters): a dry run lists each
    saga and the compensations its definition would send; confirmed, each gets its cancel
    once, progress recorded; --action resumes a run that stopped."""
    if action_id is not None:
        _print(_execute(action_id))
        return
    if not reason:
        raise click.UsageError("--reason is required (or --action to run a recorded dry run)")
    given = {k: v for k, v in options.items() if v is not None}
    _act("compensate", given, reason, dry_run, yes)
