"""`python -m vkpy` with tracemalloc on from the first import, for memory profiles.

bench/nodes.py `--tracemalloc` starts the agent through this: every allocation is
traced with its stack (`VKPY_TRACEMALLOC_FRAMES` deep, 8 by default), and SIGUSR2
writes a snapshot to `VKPY_TRACEMALLOC_OUT` (then `<that>.done`), so the bench takes
it at the moment it chooses (settled, after its window) without stopping the agent.
Tracing slows the agent (every allocation records its stack): the figures of a traced
run are its memory, never its timings.
"""

from __future__ import annotations

import os
import signal
import sys
import tracemalloc
from pathlib import Path
from types import FrameType

OUT = Path(os.environ["VKPY_TRACEMALLOC_OUT"])


def dump(_signum: int, _frame: FrameType | None) -> None:
    tracemalloc.take_snapshot().dump(str(OUT))
    OUT.with_name(OUT.name + ".done").touch()


if __name__ == "__main__":
    tracemalloc.start(int(os.environ.get("VKPY_TRACEMALLOC_FRAMES", "8")))
    signal.signal(signal.SIGUSR2, dump)
    from vkpy.app.cli import main

    sys.argv = ["vkpy", *sys.argv[1:]]
    sys.exit(main())
