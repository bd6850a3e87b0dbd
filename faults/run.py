"""A whole run: the private broker, N cycles, the report; everything cleaned up at exit."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import random
import signal
import sys
import time
import traceback
import uuid
from types import FrameType

from faults.cycle import Cycle, CycleResult, Decks
from faults.procs import ABORT, REPO, Broker
from faults.report import cycle_details, cycle_line, summary

BROKER_HOME = REPO / ".local" / "kafka-faults"


class Interrupted(Exception):
    """SIGTERM or SIGHUP: unwind like Ctrl-C, so every ``finally`` runs."""


def _raise(signum: int, frame: FrameType | None) -> None:
    raise Interrupted(signal.Signals(signum).name)


async def _interruptible(cycle: Cycle) -> CycleResult:
    """Run a cycle; SIGINT, SIGTERM or SIGHUP cancels it (its ``finally`` blocks clean up)
    and makes every helper thread stop waiting. A second signal does not cut the cleanup."""
    loop = asyncio.get_running_loop()
    task = asyncio.current_task()
    assert task is not None
    signals = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

    def interrupt() -> None:
        if not ABORT.is_set():
            ABORT.set()
            task.cancel()

    for sig in signals:
        loop.add_signal_handler(sig, interrupt)
    try:
        return await cycle.run()
    finally:
        for sig in signals:
            loop.remove_signal_handler(sig)
        signal.signal(signal.SIGTERM, _raise)
        signal.signal(signal.SIGHUP, _raise)
        if ABORT.is_set():
            raise Interrupted("signal during a cycle")


def main(
    cycles: int,
    seed: int | None,
    load_s: float,
    port: int,
    controller_port: int,
    workers: int = 1,
    standbys: int | None = None,
) -> int:
    run_id = time.strftime("%H%M%S") + uuid.uuid4().hex[:4]
    run_dir = REPO / ".local" / "faults" / run_id
    run_dir.mkdir(parents=True, exist_ok=True)
    seed = seed if seed is not None else random.randrange(1 << 30)
    out = open(run_dir / "report.txt", "w")  # noqa: SIM115  (closed in finally)

    def say(line: str) -> None:
        print(line, flush=True)
        out.write(line + "\n")
        out.flush()

    # The harness's own Kafka clients complain while the broker is down: into a file.
    logging.basicConfig(
        level=logging.WARNING,
        filename=run_dir / "harness.log",
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _raise)
    broker = Broker(BROKER_HOME, port, controller_port, run_dir / "broker-script.log")
    results: list[CycleResult] = []
    aborted: str | None = None
    say(
        f"faults run {run_id}: {cycles} cycles, seed {seed}, {workers} worker process"
        f"{'es' if workers > 1 else ''}, standbys {_standbys_text(standbys)}, logs in {run_dir}"
    )
    try:
        broker.reset()  # whatever an earlier, interrupted run left behind
        broker.start()
        # The decks get generators of their own, so a seed replays which faults each cycle
        # draws (and which worker each worker fault hits); the load and the fault timing
        # draw from a per-cycle one (timing varies).
        decks = Decks.new(seed)
        for n in range(1, cycles + 1):
            rng = random.Random(f"{seed}/{n}")
            cycle_dir = run_dir / f"cycle-{n:02d}"
            cycle = Cycle(n, run_id, broker, cycle_dir, decks, rng, load_s, workers, standbys)
            result = asyncio.run(_interruptible(cycle))
            results.append(result)
            say(cycle_line(result, cycles))
            for line in cycle_details(result):
                say(line)
    except (KeyboardInterrupt, Interrupted, asyncio.CancelledError) as exc:
        aborted = f"interrupted ({type(exc).__name__} {exc})"
    except Exception as exc:
        aborted = f"harness error: {type(exc).__name__}: {exc}"
        say(traceback.format_exc())
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not skip cleanup
        try:
            broker.reset()
        except Exception as exc:
            say(f"could not stop the private broker: {exc}")
        signal.signal(signal.SIGINT, signal.default_int_handler)
    lines = summary(results, cycles, aborted, workers)
    for line in lines:
        say(line)
    (run_dir / "summary.txt").write_text("\n".join(lines) + "\n")
    (REPO / ".local" / "faults" / "last-summary.txt").write_text("\n".join(lines) + "\n")
    say(f"report: {run_dir / 'report.txt'}; summary: {run_dir / 'summary.txt'}")
    out.close()
    failed = aborted is not None or any(r.violations for r in results) or len(results) < cycles
    return 1 if failed else 0


def _standbys_text(standbys: int | None) -> str:
    return "the default" if standbys is None else str(standbys)


def _at_least_one(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be 1 or more, not {value}")
    return value


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m faults", description=__doc__)
    parser.add_argument("--cycles", type=int, default=30)
    parser.add_argument(
        "--workers",
        type=_at_least_one,
        default=1,
        help="worker processes in the consumer group, each with its own data directory; a "
        "worker fault hits one of them at random",
    )
    parser.add_argument(
        "--standbys",
        type=int,
        default=None,
        help="SAGALINE_TABLE_STANDBY_REPLICAS of the workers (default: the setting's default)",
    )
    parser.add_argument(
        "--seed",
        type=int,
        default=None,
        help="replay a run's fault plan (which faults each cycle draws; timing varies)",
    )
    parser.add_argument("--load-seconds", type=float, default=25.0)
    parser.add_argument(
        "--port", type=int, default=int(os.environ.get("SAGALINE_FAULTS_KAFKA_PORT", "19492"))
    )
    parser.add_argument(
        "--controller-port",
        type=int,
        default=int(os.environ.get("SAGALINE_FAULTS_KAFKA_CONTROLLER_PORT", "19493")),
    )
    return parser.parse_args(argv)


def cli(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    return main(
        args.cycles,
        args.seed,
        args.load_seconds,
        args.port,
        args.controller_port,
        args.workers,
        args.standbys,
    )


if __name__ == "__main__":
    sys.exit(cli())
