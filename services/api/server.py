"""Uvicorn with a bounded shutdown (see :mod:`runtime.shutdown`).

Uvicorn stops on SIGTERM/SIGINT by waiting for open connections, then running the app's
lifespan shutdown (the command bus's Kafka producer, the read-model pool); either can wait
forever. Its signal handler arms the watchdog first. After serving, uvicorn re-raises the
signal it caught under the handler that was there before it: :func:`serve` installs one that
ignores it, so a clean stop exits 0 instead of dying of the re-raised SIGTERM.
"""

from __future__ import annotations

from types import FrameType

import uvicorn
from fastapi import FastAPI
from uvicorn.config import LOGGING_CONFIG

from runtime.shutdown import Watchdog, on_stop_signals

UNDONE = (
    "exiting without finishing open requests or closing the command producer and the "
    "database pool (broker or database unreachable?) — nothing is lost: accepted commands "
    "were on Kafka before their 202"
)


class BoundedServer(uvicorn.Server):
    def __init__(self, config: uvicorn.Config, watchdog: Watchdog) -> None:
        super().__init__(config)
        self.watchdog = watchdog

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        self.watchdog.arm(sig)
        super().handle_exit(sig, frame)


def serve(app: FastAPI, host: str, port: int, grace_s: float, own_logging: bool = False) -> None:
    """Serve until SIGTERM or SIGINT; exits (code 75) if stopping takes over ``grace_s``.
    ``own_logging``: uvicorn leaves logging alone (its loggers reach the root's handler,
    JSON lines included) instead of installing its own text handlers."""
    watchdog = Watchdog("api", grace_s, UNDONE)
    on_stop_signals(watchdog.arm)  # what uvicorn restores and re-raises into after serving
    # Open requests (a GET waiting for a consistency token) get part of the grace period.
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        timeout_graceful_shutdown=max(1, int(grace_s / 2)),
        log_config=None if own_logging else LOGGING_CONFIG,
    )
    BoundedServer(config, watchdog).run()
