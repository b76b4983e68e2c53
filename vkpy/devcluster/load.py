"""The load generator of the burst scenario: jobs dropped into a shared queue directory.

examples/hybrid/burst.yaml's replicas take job files from a directory every node of
the dev cluster can mount (nodes.SHARED_HOST_PATH) and burn the CPU time each one
asks for. Offering `cores` of work means writing jobs worth that many CPU-seconds per
second: the total CPU is fixed by the load, so the per-replica usage falls as the HPA
adds replicas, exactly as with requests spread over a Service. Used by the hybrid
integration tests and `demo hybrid`; a thread, because both callers are synchronous.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import threading
import time
from pathlib import Path

from vkpy.core.clock import SYSTEM_CLOCK, Clock

from .nodes import SHARED_HOST_PATH

#: The queue directory examples/hybrid/burst.yaml mounts.
EXAMPLE_QUEUE = f"{SHARED_HOST_PATH}/queue"


def with_queue(manifest: str, queue: Path) -> str:
    """burst.yaml's text mounting `queue` instead of the example's directory."""
    return manifest.replace(EXAMPLE_QUEUE, str(queue))


def new_queue_dir(base: Path = Path(SHARED_HOST_PATH)) -> Path:
    """A fresh queue directory the containers' user (nobody) can use."""
    base.mkdir(parents=True, exist_ok=True)
    base.chmod(0o755)
    queue = base / f"queue-{secrets.token_hex(4)}"
    queue.mkdir()
    queue.chmod(0o777)  # not sticky: the replicas (nobody) take the jobs root wrote
    return queue


class QueueLoad:
    """Offers `cores` CPU-cores of work as jobs of `job_seconds` CPU each."""

    def __init__(
        self,
        queue: Path,
        cores: float,
        job_seconds: float = 0.02,
        max_backlog: int = 200,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self.queue = queue
        self.cores = cores
        self.job_seconds = job_seconds
        #: Jobs left untaken beyond this are not added to: the replicas are behind.
        self.max_backlog = max_backlog
        self._clock = clock
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.offered = 0
        #: What stopped the generator early, if anything (`check` raises it).
        self.error: BaseException | None = None

    def backlog(self) -> int:
        return sum(1 for n in os.listdir(self.queue) if n.endswith(".job"))

    def start(self) -> QueueLoad:
        self._thread = threading.Thread(target=self._run, name="queue-load", daemon=True)
        self._thread.start()
        return self

    def check(self) -> bool:
        """True while offering load; raises what stopped the generator if it failed."""
        if self.error is not None:
            raise RuntimeError(f"the load generator failed: {self.error!r}") from self.error
        return not self._stop.is_set()

    def _run(self) -> None:
        try:
            self._offer()
        except BaseException as error:
            self.error = error
            raise

    def _offer(self) -> None:
        interval = self.job_seconds / self.cores
        next_at = self._clock.monotonic()
        while not self._stop.is_set():
            if self.backlog() < self.max_backlog:
                name = f"{time.time_ns()}-{self.offered}.job"
                tmp = self.queue / f".{name}.part"  # not a job until renamed
                tmp.write_text(str(self.job_seconds))
                tmp.chmod(0o666)
                tmp.rename(self.queue / name)
                self.offered += 1
            next_at += interval
            self._stop.wait(max(0.0, next_at - self._clock.monotonic()))

    def stop(self) -> None:
        """Stop offering work and drop the jobs not taken yet."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        for name in os.listdir(self.queue):
            if name.endswith(".job"):
                with contextlib.suppress(FileNotFoundError):
                    (self.queue / name).unlink()
