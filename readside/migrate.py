"""Apply and write the Alembic migrations in ``migrations/`` without an ``alembic.ini``.

``migrations/env.py`` imports nothing of Sagaline's: this module opens its connection and,
for a new revision, hands it the declared metadata. The import goes one way only,
readside -> migrations.
"""

from __future__ import annotations

import argparse
import importlib.util
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config
from alembic.operations.ops import MigrationScript
from alembic.script import Script, ScriptDirectory
from sqlalchemy import Engine, MetaData, inspect

import migrations
from readside.engine import create_read_engine

HEAD = "head"
SCRIPTS = Path(migrations.__file__).parent
"""The migrations: ``env.py``, the revision template and ``versions/``."""


def upgrade(database_url: str, revision: str = HEAD, scripts: Path = SCRIPTS) -> None:
    engine = create_read_engine(database_url)
    try:
        with engine.connect() as connection:
            config = _config(scripts)
            config.attributes["connection"] = connection
            command.upgrade(config, revision)
    finally:
        engine.dispose()


def is_migrated(engine: Engine) -> bool:
    """True when the schema exists (the API and the projector refuse to run without it)."""
    return inspect(engine).has_table("projection_checkpoints")


@dataclass(frozen=True)
class Revision:
    path: Path | None
    """The migration written; None when the migrations already create the declared schema
    (then nothing is written: an empty migration would only lengthen the chain)."""
    undeclared: tuple[str, ...]
    """Tables the migrations create that no declaration holds: left alone, never dropped."""


def revision(message: str, declared: Sequence[MetaData], scripts: Path = SCRIPTS) -> Revision:
    """Write the migration that takes the schema the migrations create to ``declared``.

    The migrations run on a scratch SQLite database, which Alembic's autogenerate compares
    with ``declared``: no running database is needed, and the revision holds exactly what
    the migrations lack. It never drops a table: one the migrations create and ``declared``
    lacks is reported in :attr:`Revision.undeclared` instead (a partial ``declared``, such
    as the read models without the Spark rebuild's tables, then costs nothing). SQLite
    keeps no comments, so a changed comment on an existing table is not noticed.
    """
    undeclared: list[str] = []

    def keep(_object: Any, name: str | None, kind: str, reflected: bool, twin: Any) -> bool:
        if kind == "table" and reflected and twin is None:
            undeclared.append(str(name))
            return False
        return True

    def unless_empty(_context: Any, _revision: Any, directives: list[MigrationScript]) -> None:
        ops = directives[0].upgrade_ops
        if ops is None or ops.is_empty():
            directives.clear()

    config = _config(scripts, quiet=True)  # the caller says what was written
    with tempfile.TemporaryDirectory() as scratch:
        engine = create_read_engine(f"sqlite:///{Path(scratch) / 'head.db'}")
        try:
            with engine.connect() as connection:
                config.attributes["connection"] = connection
                command.upgrade(config, HEAD)
                config.attributes["options"] = {
                    "target_metadata": list(declared),
                    "include_object": keep,
                    "process_revision_directives": unless_empty,
                }
                written = command.revision(
                    config, message, autogenerate=True, rev_id=_next_id(scripts)
                )
        finally:
            engine.dispose()
    path = Path(written.path) if isinstance(written, Script) else None
    if path is not None:
        _tidy_with_ruff(path)
    return Revision(path, tuple(undeclared))


def _config(scripts: Path, quiet: bool = False) -> Config:
    config = Config(cmd_opts=argparse.Namespace(quiet=quiet))
    config.set_main_option("script_location", str(scripts))
    return config


def _next_id(scripts: Path) -> str | None:
    """The migrations are numbered (0001, 0002...): the number after the head's."""
    heads = ScriptDirectory(str(scripts)).get_heads()
    if len(heads) == 1 and heads[0].isdigit():
        return f"{int(heads[0]) + 1:0{len(heads[0])}d}"
    return None  # Alembic's own random id


def _tidy_with_ruff(path: Path) -> None:
    """Autogenerate's text passes ``make lint`` once ruff (a dev dependency, absent from a
    production install, where this is skipped) has fixed and formatted it. Not Alembic's
    post-write hooks: they print a line each, and the command prints only the path."""
    if importlib.util.find_spec("ruff") is None:
        return
    for args in (["check", "--fix", "--quiet"], ["format", "--quiet"]):
        subprocess.run([sys.executable, "-m", "ruff", *args, str(path)], check=False)
