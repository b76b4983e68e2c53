"""The sim's pod records on disk, one small JSON file per pod, written inline.

The sim keeps one file per pod so that a restarted agent finds its pods again. A
record is a few hundred bytes in the local state dir: writing it (a temporary file
and a rename) costs about 40 µs of CPU. Handing it to a thread cost more than that
in hand-offs (a task, a lock, the executor's future, the wake-up of the event loop):
first one `asyncio.to_thread` per file (a fifth of a pod burst's CPU), then one per
batch of files, which in a burst of a thousand pods still meant most files went
alone, and showed as 3-5% of the agent's CPU (profiles in docs/scale.md). So the
files are written on the event loop, and `write` returns once the record would
survive a restart, as before.
"""

from __future__ import annotations

import os
from pathlib import Path


class RecordFiles:
    """`<uid>.json` files in one folder; `write` and `remove` return once done."""

    def __init__(self, folder: Path) -> None:
        self._folder = folder

    async def write(self, uid: str, text: str) -> None:
        path = self._folder / f"{uid}.json"
        tmp = path.with_suffix(".tmp")
        tmp.write_text(text)
        os.replace(tmp, path)

    async def remove(self, uid: str) -> None:
        (self._folder / f"{uid}.json").unlink(missing_ok=True)

    async def close(self) -> None:
        """Nothing is left to wait for: every write is done when it returns."""
