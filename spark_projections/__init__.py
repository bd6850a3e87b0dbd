"""The nightly PySpark rebuild of every read model from the domain-event topic.

Pure ``DataFrame -> DataFrame`` transforms in small modules (quinn style), chained by
:mod:`spark_projections.job`:

- :mod:`~spark_projections.read`: the Kafka source between fixed offsets.
- :mod:`~spark_projections.contract`: Spark schemas and checks derived from the pydantic
  contracts (the envelope and every payload).
- :mod:`~spark_projections.parse`: records -> well-formed domain events or rejects, with the
  projector's own triage as the fallback for anything the native checks cannot vouch for.
- :mod:`~spark_projections.gate`: duplicates and per-entity sequence gating.
- :mod:`~spark_projections.twins`: every declared read model's rows, from its declaration
  (:mod:`~spark_projections.json_text`: list columns written as the projector's codec does).
- :mod:`~spark_projections.models`: the kernel's tables (timeline, positions, held events,
  receipts) and counters.
- :mod:`~spark_projections.analytics`: daily saga statistics.
- :mod:`~spark_projections.swap`: staging tables over JDBC and the one-transaction swap.

The meaning of each model lives in :mod:`sagas.projections`, declared once
(:mod:`sagas.catalog`); nothing here names a particular model, entity or message type. Tests
prove the native expressions equal the folds for every declared model, and the whole job
equals the online projector.
"""
