"""Apply the Alembic migrations in ``migrations/`` without an ``alembic.ini``."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from sqlalchemy import Engine, inspect

import migrations

HEAD = "head"


def alembic_config(database_url: str) -> Config:
    config = Config()
    config.set_main_option("script_location", str(Path(migrations.__file__).parent))
    # ConfigParser would read "%" in a password as interpolation.
    config.set_main_option("sqlalchemy.url", database_url.replace("%", "%%"))
    return config


def upgrade(database_url: str, revision: str = HEAD) -> None:
    command.upgrade(alembic_config(database_url), revision)


def is_migrated(engine: Engine) -> bool:
    """True when the schema exists (the API and the projector refuse to run without it)."""
    return inspect(engine).has_table("projection_checkpoints")
