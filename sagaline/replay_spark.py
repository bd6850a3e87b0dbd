"""``sagaline replay --spark``: the history read by Spark's Kafka source and every key
replayed on the executors (spark_projections/replay.py), with the dead letters read here."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

from pyspark.sql import SparkSession

from runtime.settings import Settings
from sagas.catalog import PROCESS_CHANNELS
from sagas.machinery.replay import Candidate, Replay
from services.replay.history import dead_letters
from spark_projections.replay import history_frame, spark_replay
from spark_projections.session import build_session


def replay_on_spark(
    settings: Settings,
    candidates: Mapping[str, Candidate],
    baselines: Mapping[str, Candidate] | None,
    spark: SparkSession | None = None,
) -> Replay:
    """``spark``: a session to run on and leave open (the tests' shared one); without it,
    the rebuild's session is built from the settings and stopped at the end."""
    session = spark or build_session(settings, app_name="sagaline-replay")
    try:
        frame, channel_of, earliest = asyncio.run(
            history_frame(session, settings, PROCESS_CHANNELS)
        )
        letters = asyncio.run(dead_letters(settings, PROCESS_CHANNELS))
        return spark_replay(frame, channel_of, candidates, baselines, earliest, letters)
    finally:
        if spark is None:
            session.stop()
