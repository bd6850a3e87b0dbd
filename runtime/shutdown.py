"""Bounded shutdown: every long-running command ends within a grace period of SIGTERM/SIGINT.

A clean stop closes Kafka clients, database pools and the Spark gateway, and any of them can
wait forever on a peer that is gone (aiokafka's fetcher on a stopped broker, a query on an
unreachable database). Each entrypoint arms a :class:`Watchdog` when the first stop signal
arrives. If the process still lives when the grace period ends, the watchdog logs ONE line
saying what was left undone and ends the process with ``os._exit``: no further cleanup runs,
so nothing can hang it. A timer thread, not the event loop, keeps the time: the loop is what
may be stuck.

Exit codes: 0 after a clean stop, :data:`EXIT_UNFINISHED` when something was left undone.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import sys
import threading
from collections.abc import Callable

log = logging.getLogger(__name__)

EXIT_UNFINISHED = 75
"""EX_TEMPFAIL: the process stopped without finishing its shutdown (or its run); running it
again is the remedy, nothing is lost."""

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


class Watchdog:
    """Force-exits ``grace_s`` after :meth:`arm` unless the process has ended by then."""

    def __init__(
        self,
        component: str,
        grace_s: float,
        undone: str,
        before_exit: Callable[[], None] | None = None,
    ) -> None:
        self.component = component
        self.grace_s = grace_s
        self.undone = undone
        """What a forced exit leaves undone, and why that is safe (the second half of the line)."""
        self.before_exit = before_exit
        """Runs just before the forced exit (e.g. kill a child process the kernel would orphan)."""
        self._timer: threading.Timer | None = None
        self._lock = threading.Lock()

    @property
    def armed(self) -> bool:
        return self._timer is not None

    def arm(self, signum: int | None = None) -> None:
        """Start the countdown; later calls (a second signal) change nothing."""
        with self._lock:
            if self._timer is not None:
                return
            self._timer = threading.Timer(self.grace_s, self._expire)
            self._timer.name = f"{self.component}-shutdown-watchdog"
            self._timer.daemon = True  # never what keeps a finished process alive
            self._timer.start()
        cause = signal.Signals(signum).name if signum else "stop requested"
        log.info("%s: %s; stopping (forced after %g s)", self.component, cause, self.grace_s)

    def fail(self, error: BaseException) -> None:
        """The stop itself failed (a client raised while closing): end now, with the line."""
        first = (str(error).splitlines() or [""])[0]
        cause = f"{type(error).__name__}: {first}" if first else type(error).__name__
        exit_with_line(
            f"{self.component}: shutdown did not finish (stopping raised {cause}); {self.undone}"
        )

    def _expire(self) -> None:
        if self.before_exit is not None:
            try:
                self.before_exit()
            except Exception as exc:  # the exit below matters more
                log.warning("%s: cleanup before the forced exit failed: %s", self.component, exc)
        exit_with_line(
            f"{self.component}: shutdown did not finish within {self.grace_s:g} s; {self.undone}"
        )


def exit_with_line(line: str, code: int = EXIT_UNFINISHED) -> None:
    """Log ``line`` (the one line saying what was left undone) and end the process now."""
    log.error("%s", line)
    for handler in logging.getLogger().handlers:
        with contextlib.suppress(Exception):  # a broken handler must not keep us alive
            handler.flush()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def on_stop_signals(handler: Callable[[int], None]) -> None:
    """Call ``handler(signum)`` in the main thread on SIGTERM and SIGINT (no event loop
    needed; a handler that raises interrupts whatever the main thread was waiting on)."""
    for signum in STOP_SIGNALS:
        signal.signal(signum, lambda received, _frame: handler(received))
