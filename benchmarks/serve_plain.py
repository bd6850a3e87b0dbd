"""`sagaline api` of another commit's tree (the baseline), served as that commit served it.

Run with the other tree as the working directory and on PYTHONPATH. Before this branch the
API ran with uvicorn's plain extra-less install: the asyncio loop and the h11 parser.
uvicorn's "auto" would now pick uvloop and httptools (installed for this branch), so the
baseline pins the two it really had.
"""

from __future__ import annotations

from typing import Any

import uvicorn

_init = uvicorn.Config.__init__


def _plain(self: uvicorn.Config, *args: Any, **kwargs: Any) -> None:
    kwargs["loop"] = "asyncio"
    kwargs["http"] = "h11"
    _init(self, *args, **kwargs)


uvicorn.Config.__init__ = _plain  # type: ignore[method-assign]

from sagaline.cli import main  # noqa: E402  (after the patch, from the tree on PYTHONPATH)

main(["api"])
