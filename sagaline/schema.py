"""The read-model database as declared, whole: the read models and the kernel's tables
(:mod:`readside.schema`), the Spark rebuild's own tables (:mod:`spark_projections.tables`)
and the operators' actions (:mod:`readside.operator_actions`).

Only this floor sees them all. ``sagaline db revision`` compares the migrations with all of it,
so a new migration never drops the tables of the part it was not shown.
"""

from __future__ import annotations

from sqlalchemy import MetaData

from readside.operator_actions import metadata as operator_actions
from readside.schema import metadata as read_models
from spark_projections.tables import metadata as rebuild

DECLARED: tuple[MetaData, ...] = (read_models, rebuild, operator_actions)
