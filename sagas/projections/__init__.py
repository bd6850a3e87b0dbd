"""The meaning of every read model, as pure folds over domain events.

Used as-is by the online projector (services/projector) and by the nightly Spark rebuild
(spark_projections), so the two cannot disagree. No database, no Kafka, no clock.
"""
