"""Progress lines while the rebuild runs, and its closing summary.

Every line is ``key=value`` pairs, easy to read and to grep in a cron log:
``stage=... events_read=... rows_written=...`` at each stage and every few seconds from a
heartbeat thread (with the running Spark stage's task count), ``summary ...`` at the end.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from pyspark import SparkContext

Emit = Callable[[str], None]


def print_line(line: str) -> None:
    print(line, flush=True)


@dataclass
class Progress:
    emit: Emit = print_line
    interval_s: float = 5.0
    stage: str = "start"
    events_to_read: int = 0
    events_read: int | None = None
    rows: dict[str, int] = field(default_factory=dict)
    started: float = field(default_factory=time.monotonic)
    timings: dict[str, float] = field(default_factory=dict)
    _stage_started: float = field(default_factory=time.monotonic)
    _estimate: int = 0
    """Events read so far while reading, from the share of Spark tasks done."""
    on_stage: Callable[[str], None] | None = None
    """Called with each stage entered (the rebuild's trace: spark_projections/tracing.py)."""
    _stop: threading.Event = field(default_factory=threading.Event)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def rows_written(self) -> int:
        return sum(self.rows.values())

    def enter(self, stage: str, **extra: object) -> None:
        with self._lock:
            now = time.monotonic()
            self.timings[self.stage] = self.timings.get(self.stage, 0.0) + now - self._stage_started
            self.stage, self._stage_started = stage, now
        if self.on_stage is not None:
            self.on_stage(stage)
        self.emit(self._line(**extra))

    def read(self, events: int) -> None:
        self.events_read = events
        self.emit(self._line())

    def wrote(self, table: str, rows: int) -> None:
        with self._lock:
            self.rows[table] = rows
        self.emit(self._line(table=table, rows=rows))

    def heartbeat(self, context: SparkContext) -> threading.Thread:
        """Print a line every ``interval_s`` until :meth:`stop`."""

        def run() -> None:
            while not self._stop.wait(self.interval_s):
                try:
                    done, total = _spark_tasks(context)
                except Exception:  # the context is stopping: nothing left to report
                    return
                if total and self.events_read is None:  # Kafka tasks first, then the gate's
                    estimate = self.events_to_read * done // total
                    self._estimate = max(self._estimate, estimate)
                self.emit(self._line(**({"spark_tasks": f"{done}/{total}"} if total else {})))

        thread = threading.Thread(target=run, name="rebuild-progress", daemon=True)
        thread.start()
        return thread

    def quiet(self) -> None:
        """Stop the heartbeat (before the Spark context goes away)."""
        self._stop.set()

    def stop(self) -> None:
        self.quiet()
        self.enter("done")

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def _line(self, **extra: object) -> str:
        read = (
            f"~{self._estimate}/{self.events_to_read}"
            if self.events_read is None
            else str(self.events_read)
        )
        fields: dict[str, object] = {
            "stage": self.stage,
            "events_read": read,
            "rows_written": self.rows_written,
            "elapsed_s": f"{self.elapsed():.1f}",
            **extra,
        }
        return " ".join(f"{k}={v}" for k, v in fields.items())


def _spark_tasks(context: SparkContext) -> tuple[int, int]:
    """Tasks done and in all of the Spark stages running now (0, 0 between jobs)."""
    tracker = context.statusTracker()
    done = total = 0
    for stage_id in tracker.getActiveStageIds():
        info = tracker.getStageInfo(stage_id)
        if info is not None:
            done += info.numCompletedTasks
            total += info.numTasks
    return done, total


def summary_lines(
    *,
    topic: str,
    offsets: str,
    events_read: int,
    verdicts: Mapping[str, int],
    rows: Mapping[str, int],
    handover: str,
    timings: Mapping[str, float],
    total_s: float,
) -> list[str]:
    counts = " ".join(f"{k}={v}" for k, v in sorted(verdicts.items()))
    per_table = " ".join(f"{k}={v}" for k, v in rows.items())
    spent = " ".join(f"{k}={v:.1f}" for k, v in timings.items() if k not in ("start", "done"))
    return [
        f"summary topic={topic} offsets={offsets}",
        f"summary events_read={events_read} {counts}",
        f"summary rows {per_table}",
        f"summary handover {handover}",
        f"summary seconds total={total_s:.1f} {spent}",
    ]
