"""The sim's pod records on disk, written in batches by one thread hop.

The sim keeps one JSON file per pod so that a restarted agent finds its pods again.
Writing each file through its own `asyncio.to_thread` cost a burst of pods a fifth of
its CPU in thread hand-offs (futures, locks, wake-ups; profile in docs/scale.md), more
than the writes. Here every write and removal asked for while a batch is being
written joins the next batch, and one thread call writes a whole batch: a burst of a
thousand pods takes a few hops, not a thousand. Each caller still waits until its
own file is on disk, so `create_pod` returns only once the record would survive a
restart.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path


class _Batch:
    __slots__ = ("done", "files")

    def __init__(self) -> None:
        self.files: dict[str, str | None] = {}
        self.done: asyncio.Future[None] = asyncio.get_running_loop().create_future()


class RecordFiles:
    """`<uid>.json` files in one folder; `write` and `remove` return once done."""

    def __init__(self, folder: Path) -> None:
        self._folder = folder
        self._open: _Batch | None = None
        self._lock = asyncio.Lock()
        self._tasks: set[asyncio.Task[None]] = set()

    async def write(self, uid: str, text: str) -> None:
        await self._queue(uid, text)

    async def remove(self, uid: str) -> None:
        await self._queue(uid, None)

    async def close(self) -> None:
        """Wait for the batches already asked for."""
        while self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _queue(self, uid: str, text: str | None) -> None:
        batch = self._open
        if batch is None:
            batch = self._open = _Batch()
            task = asyncio.create_task(self._flush(batch), name="sim-record-files")
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        batch.files[uid] = text
        await asyncio.shield(batch.done)

    async def _flush(self, batch: _Batch) -> None:
        async with self._lock:  # one batch at a time, in order
            if self._open is batch:
                self._open = None  # later writes start the next batch
            try:
                await asyncio.to_thread(_apply, self._folder, batch.files)
            except OSError as error:
                batch.done.set_exception(error)
            else:
                batch.done.set_result(None)
            if not batch.done.cancelled():
                batch.done.exception()  # retrieved: a batch nobody waits for logs nothing


def _apply(folder: Path, files: dict[str, str | None]) -> None:
    for uid, text in files.items():
        path = folder / f"{uid}.json"
        if text is None:
            path.unlink(missing_ok=True)
            continue
        tmp = path.with_suffix(".tmp")
        tmp.write_text(text)
        os.replace(tmp, path)
