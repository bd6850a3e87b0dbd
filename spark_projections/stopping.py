"""``sagaline rebuild`` with a bounded stop (see :mod:`runtime.shutdown`).

SIGTERM or SIGINT interrupts the run where it is (a Spark action, the pause, the swap
transaction, which then rolls back): the ``finally`` blocks stop the session, empty the
scratch directory and release the run lock; then the gateway JVM is ended, so no Spark
process outlives the command. If that cleanup itself hangs (an unreachable database
holding the lock's connection, a JVM that does not answer), the watchdog kills the JVM
and exits after the grace period.
"""

from __future__ import annotations

import logging
import signal

from runtime.settings import Settings
from runtime.shutdown import EXIT_UNFINISHED, Watchdog, on_stop_signals
from spark_projections.job import Summary, run
from spark_projections.session import stop_jvm

log = logging.getLogger(__name__)

JVM_STOP_S = 3.0
"""How long Spark's own shutdown hooks get before the JVM is killed."""

UNDONE = (
    "killed the Spark JVM and exited without finishing the rebuild's clean-up — the live "
    "read models are untouched unless the swap had committed; the run lock dies with the "
    "process; run it again"
)


class Stopped(BaseException):
    """A stop signal arrived (a BaseException, so no ``except Exception`` swallows it)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def run_bounded(settings: Settings, *, until_checkpoints: bool) -> Summary:
    """:func:`spark_projections.job.run`, ended within the grace period of a stop signal:
    raises ``SystemExit(EXIT_UNFINISHED)`` after one line saying what was left undone."""
    watchdog = Watchdog(
        "rebuild", settings.shutdown_grace_s, UNDONE, before_exit=lambda: stop_jvm(0)
    )

    received: list[str] = []

    def interrupt(signum: int) -> None:
        received.append(signal.Signals(signum).name)
        first = not watchdog.armed
        watchdog.arm(signum)
        if first:  # a second signal must not break off the clean-up the first one started
            raise Stopped(signum)

    on_stop_signals(interrupt)
    try:
        return run(settings, until_checkpoints=until_checkpoints)
    except BaseException as exc:
        if not watchdog.armed:
            raise
        # Stopped, or what the clean-up raised after it: a py4j call broken off midway can
        # leave its connection answering the next call wrongly (session.stop() then fails).
        stop_jvm(JVM_STOP_S)
        log.error(
            "rebuild: stopped by %s before it finished; nothing was swapped in unless the swap "
            "had committed, the run lock is released and Spark is stopped — run it again",
            received[0] if received else type(exc).__name__,
        )
        raise SystemExit(EXIT_UNFINISHED) from None
    finally:
        stop_jvm(JVM_STOP_S)
