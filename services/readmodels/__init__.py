"""Read models in SQL: table definitions, the projector's writes, the API's queries.

``schema`` (tables; Alembic's ``migrations/`` creates them, ``migrate`` applies those),
``engine`` (PostgreSQL or SQLite in WAL mode), ``codec`` (rows <-> SQL values, equal on both
backends), ``limits`` (does an event fit the columns?), ``store`` and ``upsert`` (the
projector's batched reads and writes), ``queries`` and ``public`` (what the API reads and
shows), ``freshness`` (waiting for a consistency token or a final status).
"""
