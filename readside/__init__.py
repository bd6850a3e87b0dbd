"""The read-side kernel: what the online projector and the nightly Spark rebuild share.

``schema`` (the SQL tables, built from the read-model declarations in
:mod:`sagas.projections.models`; Alembic's ``migrations/`` creates them, ``migrate``
applies those), ``engine`` (PostgreSQL or SQLite in WAL mode), ``codec`` (rows <-> SQL
values, equal on both backends), ``triage`` (a record -> an event to project, or a reason to
dead-letter it), ``limits`` (does an event fit the columns?), ``batch`` (apply a batch of
events in one transaction), ``store`` and ``upsert`` (its batched reads and writes),
``queries`` (plain SELECTs for the API and the tools).

It imports the pure core (:mod:`sagas`) and :mod:`runtime`, never a component.
"""
