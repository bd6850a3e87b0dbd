"""Uvicorn with a bounded shutdown (see :mod:`runtime.shutdown`).

The event loop and the HTTP parser are uvloop and httptools (``uvicorn[standard]``): under
`wrk`, POST /orders spends most of its time in the loop and the parser, and these two
roughly double what one process answers (BENCHMARKS.md, "REST API"). Without them it falls
back to asyncio and h11 and says so in one warning.

Uvicorn stops on SIGTERM/SIGINT by waiting for open connections, then running the app's
lifespan shutdown (the command bus's Kafka producer, the read-model pool); either can wait
forever. Its signal handler arms the watchdog first. After serving, uvicorn re-raises the
signal it caught under the handler that was there before it: :func:`serve` installs one that
ignores it, so a clean stop exits 0 instead of dying of the re-raised SIGTERM.
"""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import os
import signal
import socket
from types import FrameType

import uvicorn
from fastapi import FastAPI
from uvicorn.config import LOGGING_CONFIG
from uvicorn.supervisors import Multiprocess

from runtime.settings import Settings
from runtime.shutdown import Watchdog, on_stop_signals

log = logging.getLogger(__name__)

APP_FACTORY = "services.api.app:create_api_from_environment"
"""What each process of ``SAGALINE_API_WORKERS`` > 1 imports and calls (uvicorn's spawned
workers cannot be handed an app object)."""

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


def loop_and_parser() -> tuple[str, str]:
    """uvloop and httptools when installed, else asyncio and h11 (with a warning: the API
    then answers far fewer requests per process)."""
    loop = "uvloop" if importlib.util.find_spec("uvloop") else "asyncio"
    http = "httptools" if importlib.util.find_spec("httptools") else "h11"
    if (loop, http) != ("uvloop", "httptools"):
        log.warning(
            "uvloop or httptools is not installed (pip install 'uvicorn[standard]'): the API "
            "runs on %s and %s, much slower under load",
            loop,
            http,
        )
    return loop, http


def server_config(app: FastAPI | str, settings: Settings, own_logging: bool) -> uvicorn.Config:
    """The uvicorn configuration of the API: ``app`` is the application, or (several worker
    processes) the import string of its factory."""
    loop, http = loop_and_parser()
    return uvicorn.Config(
        app,
        host=settings.api_host,
        port=settings.api_port,
        loop=loop,
        http=http,
        workers=settings.api_workers,
        factory=isinstance(app, str),
        access_log=settings.api_access_log,
        # Open requests (a GET waiting for a consistency token) get part of the grace period.
        timeout_graceful_shutdown=max(1, int(settings.shutdown_grace_s / 2)),
        log_config=None if own_logging else LOGGING_CONFIG,
    )


def serve(app: FastAPI, settings: Settings, own_logging: bool = False) -> None:
    """Serve until SIGTERM or SIGINT; exits (code 75) if stopping takes over the grace
    period. ``own_logging``: uvicorn leaves logging alone (its loggers reach the root's
    handler, JSON lines included) instead of installing its own text handlers."""
    watchdog = Watchdog("api", settings.shutdown_grace_s, UNDONE)
    on_stop_signals(watchdog.arm)  # what uvicorn restores and re-raises into after serving
    BoundedServer(server_config(app, settings, own_logging), watchdog).run()


def serve_workers(settings: Settings, own_logging: bool = False) -> None:
    """``SAGALINE_API_WORKERS`` processes behind one listening socket (uvicorn's supervisor):
    each runs :data:`APP_FACTORY`, so each has its own command producer, key ring, rate
    buckets and metrics. A stop signal arms the watchdog in the supervisor, which kills the
    workers and exits (code 75) if they have not stopped within the grace period."""
    config = server_config(APP_FACTORY, settings, own_logging)
    supervisor = BoundedSupervisor(config, [config.bind_socket()], settings.shutdown_grace_s)
    supervisor.run()


class BoundedSupervisor(Multiprocess):
    def __init__(
        self, config: uvicorn.Config, sockets: list[socket.socket], grace_s: float
    ) -> None:
        super().__init__(config, sockets)
        self.watchdog = Watchdog("api", grace_s, UNDONE, before_exit=self._kill_workers)

    def handle_int(self) -> None:
        self.watchdog.arm(signal.SIGINT)
        super().handle_int()

    def handle_term(self) -> None:
        self.watchdog.arm(signal.SIGTERM)
        super().handle_term()

    def _kill_workers(self) -> None:
        for process in self.processes:
            if process.pid is not None:
                with contextlib.suppress(ProcessLookupError):  # it ended meanwhile
                    os.kill(process.pid, signal.SIGKILL)
