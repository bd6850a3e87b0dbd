"""The read-model database as declared, whole: the read models and the kernel's tables
(:mod:`readside.schema`) and the Spark rebuild's own tables (:mod:`spark_projections.tables`).

Only this floor sees both. ``sagaline db revision`` compares the migrations with all of it,
so a new migration never drops the tables of the part it was not shown.
"""

from __future__ import annotations

from sqlalchemy import MetaData

from readside.schema import metadata as read_models
from spark_projections.tables import metadata as rebuild

DECLARED: tuple[MetaData, ...] = (read_models, rebuild)
