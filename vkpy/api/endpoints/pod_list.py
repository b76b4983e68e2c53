"""The kubelet API's `/pods` body, built from each pod's JSON encoded once.

A node with 10,000 pods answers `/pods` with about 22 MB of JSON. Encoding all of it
for every request held the event loop for a tenth of a second or more per request
(more on a loaded machine), and every other kubelet API request, `kubectl logs`
included, waited behind it: the profile of bench/big_node.py under churn had half of
the agent's loop time in that encoding (issue 17). Between two requests only the
pods that changed differ, so each pod's encoding is kept and reused while the pod
object is the same one (the pod controller replaces a pod's object, never edits it,
when the API server or the agent's own write gives a newer one), and the body is the
pods' bytes joined.

Only the pods of the last answer are kept, so the cache holds one encoding per pod
of the node and no more (about the size of one answer).

Even unencoded, 22 MB is costly to move: on the loaded 2-core machine one join of the
pieces took 80 ms and the TLS layer copies the bytes again. So the route sends the
body in chunks (`chunks`), letting the event loop serve other requests in between,
instead of building and writing it in one go. Each chunk costs the answer a turn of
the event loop, and under churn a turn waits behind everything else that is ready:
with 1 MiB chunks a 22 MB answer took 22 turns, most of its time (a 13 MB `/pods`
took 0.76 s with curl as the client while pods were being created). Chunks of 4 MiB
take 6 turns, each holding the loop for a few milliseconds of TLS encryption.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from vkpy.core import jsoncodec
from vkpy.core.objects import KubeObject

_HEAD = b'{"kind":"PodList","apiVersion":"v1","metadata":{},"items":['
_TAIL = b"]}"


class PodListEncoder:
    """Encodes PodLists, reusing the bytes of pods unchanged since the last one."""

    def __init__(self) -> None:
        self._encoded: dict[int, tuple[KubeObject, bytes]] = {}
        self.encoded_pods = 0
        """How many pod objects were encoded (not reused) so far: for tests and metrics."""

    def encode(self, pods: Iterable[KubeObject]) -> bytes:
        """The PodList of `pods`, as compact JSON."""
        return b"".join(chunks(self.pieces(pods)))

    def pieces(self, pods: Iterable[KubeObject]) -> list[bytes]:
        """Each pod's JSON, in order (`chunks` makes the PodList of them)."""
        previous, current = self._encoded, {}
        parts: list[bytes] = []
        for pod in pods:
            key = id(pod)
            entry = previous.get(key)
            # The entry keeps its pod alive, so an id seen again is the same object.
            if entry is None or entry[0] is not pod:
                entry = (pod, jsoncodec.dumps(pod))
                self.encoded_pods += 1
            current[key] = entry
            parts.append(entry[1])
        self._encoded = current
        return parts


def length(pieces: list[bytes]) -> int:
    """The size of the PodList `chunks` makes of `pieces`."""
    return len(_HEAD) + sum(map(len, pieces)) + max(0, len(pieces) - 1) + len(_TAIL)


def chunks(pieces: list[bytes], size: int = 4 << 20) -> Iterator[bytes]:
    """The PodList of the pods' `pieces`, in chunks of about `size` bytes."""
    group: list[bytes] = [_HEAD]
    filled = len(_HEAD)
    for index, piece in enumerate(pieces):
        if index:
            group.append(b",")
        group.append(piece)
        filled += len(piece) + 1
        if filled >= size:
            yield b"".join(group)
            group, filled = [], 0
    group.append(_TAIL)
    yield b"".join(group)
