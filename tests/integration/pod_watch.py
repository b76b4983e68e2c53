"""Every version of a pod the API server shows, for tests that check an invariant
over a pod's whole life (as the upstream e2e suite does with a watch), not only the
state at the end.

`PodWatch` runs `kubectl get pods --watch -o json` with a field selector on the
pod's name (so it can start before the pod exists) and keeps each object it prints.
"""

from __future__ import annotations

import json
import subprocess
import threading
from types import TracebackType
from typing import Any

from vkpy.devcluster import ClusterAccess

Pod = dict[str, Any]


class PodWatch:
    def __init__(self, cluster: ClusterAccess, namespace: str, name: str) -> None:
        self._process = subprocess.Popen(
            cluster.kubectl_argv(
                "get",
                "pods",
                "-n",
                namespace,
                "--field-selector",
                f"metadata.name={name}",
                "--watch",
                "-o",
                "json",
            ),
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        self._lock = threading.Lock()
        self._versions: list[Pod] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self._process.stdout is not None
        decoder = json.JSONDecoder()
        buffer = ""
        for line in self._process.stdout:
            buffer += line
            stripped = buffer.lstrip()
            try:
                item, end = decoder.raw_decode(stripped)
            except json.JSONDecodeError:
                continue
            buffer = stripped[end:]
            # The initial list of an absent pod is an empty List; skip it.
            if isinstance(item, dict) and item.get("kind") == "Pod":
                with self._lock:
                    self._versions.append(item)

    def versions(self) -> list[Pod]:
        """The versions seen so far, oldest first."""
        with self._lock:
            return list(self._versions)

    def stop(self) -> None:
        self._process.terminate()
        try:
            self._process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
        self._reader.join(timeout=10)

    def __enter__(self) -> PodWatch:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()
