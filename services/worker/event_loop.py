"""Which event loop the worker runs on.

uvloop (libuv, in C) in place of asyncio's own loop: below full load most of a saga's CPU is
the per-batch work of waking up, fetching and waiting for acknowledgements rather than
deciding (BENCHMARKS.md, issue 27), and that is the event loop's. The policy is set before
Faust builds anything, so its main loop and its consumer thread's loop are both uvloop's.
"""

from __future__ import annotations

import asyncio

import uvloop


def use(uvloop_on: bool) -> None:
    """The policy every later event loop of the process comes from."""
    policy = uvloop.EventLoopPolicy() if uvloop_on else asyncio.DefaultEventLoopPolicy()
    asyncio.set_event_loop_policy(policy)


def running() -> str:
    """The running loop's kind, for /metrics: ``uvloop`` or ``asyncio``."""
    loop = asyncio.get_running_loop()
    return "uvloop" if isinstance(loop, uvloop.Loop) else "asyncio"
