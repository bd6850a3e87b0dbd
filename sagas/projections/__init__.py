"""The meaning of every read model, declared once as columns over domain events.

The online projector (services/projector) folds them event by event (:mod:`.fold`), the
nightly Spark rebuild (spark_projections) computes them in bulk: two interpreters of one
spec. No database, no Kafka, no clock.
"""
