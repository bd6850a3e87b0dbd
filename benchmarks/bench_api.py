"""The REST API alone under `wrk`: POST /orders/s and GET /healthz/s, beside a baseline.

    python -m benchmarks.bench_api [--seconds 15] [--connections 32] [--rounds 2]
        [--baseline-ref main] [--lingers 0] [--workers 1] [--access-log]

The API runs alone against the real broker (no worker, no projector: accepted commands just
land on the command topic). Each measurement is `wrk` with 32 connections for a fixed time,
after a short warm-up. Every POST carries its own Idempotency-Key (the API is idempotent by
it: a repeated key is one order answered twice); the rate limit is off
(SAGALINE_API_RATE_PER_S=0), so nothing is throttled; any non-2xx answer is printed and
fails the run. Auth is on, as in production: one key with every scope.

Baseline in the same run, alternating with the API of this checkout round by round: the
API of ``--baseline-ref`` (default main), its own code from `git archive`, served as it was
before this branch (uvicorn's asyncio loop and h11 parser). ``--lingers`` and ``--workers``
add POST runs of this checkout with other producer lingers / API process counts.

Besides req/s, each line gives the CPU the API and wrk used (wrk's own rusage: the driver
is not what is measured) and the requests per API CPU-second: on a machine whose cores
other work shares, the API gets what the scheduler gives it, and this is the figure that
does not depend on that share.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import uuid
from pathlib import Path

from benchmarks.apirun import (
    ApiProcess,
    WrkResult,
    archive,
    ensure_wrk,
    lscpu_model,
    run_wrk,
    short_rev,
)
from benchmarks.common import delete_run_topics, git_rev, machine
from runtime.settings import Settings
from runtime.topics import create_topics
from services.keys import ensure_local_key

PORTS = (19550, 19551)


def load() -> str:
    return f"{os.getloadavg()[0]:.2f}"


def measure(api: ApiProcess, mode: str, key: str, args: argparse.Namespace, tag: str) -> WrkResult:
    prefix = f"{tag}-{uuid.uuid4().hex[:8]}"
    run_wrk(api.url, mode, key=key, prefix=prefix + "w", seconds=2, api_pid=api.pid)  # warm-up
    result = run_wrk(
        api.url,
        mode,
        key=key,
        prefix=prefix,
        seconds=args.seconds,
        connections=args.connections,
        api_pid=api.pid,
    )
    if result.non2xx or result.errors:
        print(f"  !! {tag} {mode}: {result.non2xx} non-2xx answers, {result.errors} socket errors")
    return result


def main(args: argparse.Namespace) -> None:
    ensure_wrk()
    run = uuid.uuid4().hex[:6]
    root = (Path(".local") / f"bench-api-{run}").resolve()
    root.mkdir(parents=True)
    settings = Settings(
        topic_prefix=f"benchapi{run}",
        app_id=f"benchapi{run}",
        api_keys_file=root / "api-keys",
        database_url=f"sqlite:///{root}/read.db",
        api_rate_per_s=0,  # no throttling: every request is an order, none is a 429
        api_port=PORTS[0],
        log_level="WARNING",
    )
    key = ensure_local_key(root / "api-keys.key", settings.api_keys_file)
    base_src = archive(args.baseline_ref, root / "baseline")
    print(f"machine: {machine()}\nlscpu: {lscpu_model()}")
    print(
        f"commit: {git_rev()} (baseline: {args.baseline_ref} = {short_rev(args.baseline_ref)})  "
        f"wrk: {args.connections} connections, 2 threads, {args.seconds:g} s per run"
    )
    print(f"load      1-min load average before: {load()}")
    asyncio.run(create_topics(settings))

    def baseline_api() -> ApiProcess:
        return ApiProcess(
            settings.model_copy(update={"api_port": PORTS[1]}),
            root / "api-baseline.log",
            source=base_src,
        )

    def this_api(linger: float, workers: int, access_log: bool = False) -> ApiProcess:
        env = {
            "SAGALINE_API_PRODUCER_LINGER_MS": str(linger),
            "SAGALINE_API_WORKERS": str(workers),
            "SAGALINE_API_ACCESS_LOG": str(access_log).lower(),
        }
        log = root / f"api-{linger}-{workers}-{access_log}.log"
        return ApiProcess(settings, log, extra_env=env)

    results: dict[str, list[WrkResult]] = {}
    first_linger, first_workers = args.lingers[0], args.workers[0]
    configs: list[tuple[str, ApiProcess | None, float, int]] = [
        ("baseline", None, 0, 1),
        ("this", None, first_linger, first_workers),
    ]
    try:
        for round_ in range(args.rounds):
            for name, _, linger, workers in configs:
                api = baseline_api() if name == "baseline" else this_api(linger, workers)
                api.start()
                try:
                    for mode in ("get", "post"):
                        r = measure(api, mode, key, args, f"{name}{round_}")
                        results.setdefault(f"{name} {mode}", []).append(r)
                        print(f"  round {round_ + 1} {name:8} {mode:4} {r.line()}  load {load()}")
                finally:
                    api.stop()
        extra = [(lg, w) for lg in args.lingers for w in args.workers]
        for linger, workers in extra[1:]:
            api = this_api(linger, workers)
            api.start()
            try:
                r = measure(api, "post", key, args, f"l{linger}w{workers}")
                results.setdefault(f"this post linger={linger} workers={workers}", []).append(r)
                print(
                    f"  linger {linger} ms, {workers} API process(es) post {r.line()}  load {load()}"
                )
            finally:
                api.stop()
        if args.access_log:
            api = this_api(first_linger, first_workers, access_log=True)
            api.start()
            try:
                r = measure(api, "post", key, args, "accesslog")
                results.setdefault("this post with the access log on", []).append(r)
                print(f"  access log on post {r.line()}  load {load()}")
            finally:
                api.stop()
    finally:
        asyncio.run(delete_run_topics(settings))

    def rate(name: str) -> float:
        return statistics.median(r.rate for r in results[name])

    def label(name: str) -> str:
        rs = results[name]
        bad = sum(r.non2xx + r.errors for r in rs)
        wrk_share = sum(r.wrk_cpu_s for r in rs) / sum(r.seconds for r in rs)
        api_share = sum(r.api_cpu_s for r in rs) / sum(r.seconds for r in rs)
        per_cpu = sum(r.requests for r in rs) / sum(r.api_cpu_s for r in rs)
        return (
            f"{rate(name):7,.0f} req/s (median of {len(rs)}; non-2xx {bad}; "
            f"CPU: api {api_share:.2f} cores, wrk {wrk_share:.2f} cores; "
            f"{per_cpu:,.0f} requests per API CPU-second)"
        )

    print(f"baseline  {args.baseline_ref}, asyncio + h11:  GET /healthz {label('baseline get')}")
    print(f"baseline  {args.baseline_ref}, asyncio + h11:  POST /orders {label('baseline post')}")
    print(
        f"api       this, uvloop + httptools, linger {first_linger} ms, {first_workers} process(es):"
    )
    print(f"          GET /healthz {label('this get')}")
    print(f"          POST /orders {label('this post')}")
    for name in results:
        if name.startswith("this post "):
            print(f"          {name}: {label(name)}")
    print(
        f"result    POST /orders {rate('this post'):,.0f}/s = {rate('this post') / rate('baseline post'):.2f}x "
        f"the baseline; GET /healthz {rate('this get'):,.0f}/s = "
        f"{rate('this get') / rate('baseline get'):.2f}x; target POST >= 2,000/s with one process: "
        f"{'MET' if rate('this post') >= 2000 and first_workers == 1 else 'not met'}"
    )
    print(f"load      1-min load average after: {load()}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seconds", type=float, default=15)
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--baseline-ref", default="main")
    parser.add_argument(
        "--lingers",
        type=lambda s: [float(x) for x in s.split(",")],
        default=[0.0],
        help="producer linger_ms values of this API to measure (comma-separated; first is the headline)",
    )
    parser.add_argument(
        "--workers",
        type=lambda s: [int(x) for x in s.split(",")],
        default=[1],
        help="SAGALINE_API_WORKERS values to measure (comma-separated; first is the headline)",
    )
    parser.add_argument(
        "--access-log",
        action="store_true",
        help="one more POST run of this API with SAGALINE_API_ACCESS_LOG=true",
    )
    main(parser.parse_args())
