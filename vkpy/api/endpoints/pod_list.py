"""The kubelet API's `/pods` body, built from each pod's JSON as the node holds it.

A node with 10,000 pods answers `/pods` with about 22 MB of JSON. Encoding all of it
for every request held the event loop for a tenth of a second or more per request
(more on a loaded machine), and every other kubelet API request, `kubectl logs`
included, waited behind it: the profile of bench/big_node.py under churn had half of
the agent's loop time in that encoding (issue 17). The pod controller keeps each
settled pod as its JSON (pod_record.py), so the body is those bytes joined: only the
pods with work under way are encoded for a request, and none is decoded.

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

from collections.abc import Iterator

_HEAD = b'{"kind":"PodList","apiVersion":"v1","metadata":{},"items":['
_TAIL = b"]}"


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
