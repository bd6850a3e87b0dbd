"""Alembic environment: runs the migrations against ``sqlalchemy.url`` (or a given connection).

The engine comes from :func:`readside.engine.create_read_engine`, so SQLite gets
the same pragmas (WAL, busy timeout) as the API and the projector.
"""

from __future__ import annotations

from alembic import context
from sqlalchemy.engine import Connection

from readside.engine import create_read_engine
from readside.schema import metadata

config = context.config


def _configure(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=metadata,
        # SQLite can alter a table only by copying it; batch mode does that for us.
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
    )


def run_offline() -> None:
    context.configure(
        url=config.get_main_option("sqlalchemy.url"),
        target_metadata=metadata,
        literal_binds=True,
    )
    with context.begin_transaction():
        context.run_migrations()


def run_online() -> None:
    given: Connection | None = config.attributes.get("connection")
    if given is not None:
        _configure(given)
        with context.begin_transaction():
            context.run_migrations()
        return
    engine = create_read_engine(config.get_main_option("sqlalchemy.url") or "")
    try:
        with engine.connect() as connection:
            _configure(connection)
            with context.begin_transaction():
                context.run_migrations()
    finally:
        engine.dispose()


if context.is_offline_mode():
    run_offline()
else:
    run_online()
