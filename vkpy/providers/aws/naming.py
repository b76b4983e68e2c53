"""Names of AWS resources derived from pods, within each service's limits.

A name must be unique per pod (a pod deleted and created again under the same name
is a new pod, so the UID is part of it), readable (namespace and name first), and
fit the service's length and character rules. The pod's full identity is in the
resource's tags; the name only has to be unique and recognisable.
"""

from __future__ import annotations

import hashlib
import re

from vkpy.providers.base import PodRef

PREFIX = "vkpy-"
LAMBDA_FUNCTION_MAX = 64
ECS_FAMILY_MAX = 255
ECS_STARTED_BY_MAX = 128
_UID_CHARS = 12


def _uid_part(uid: str) -> str:
    return hashlib.sha256(uid.encode()).hexdigest()[:_UID_CHARS]


def _clean(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_-]", "-", text)


def resource_name(ref: PodRef, limit: int) -> str:
    """`vkpy-<namespace>-<name>-<uid hash>`, the readable part cut to fit `limit`."""
    suffix = "-" + _uid_part(ref.uid)
    room = limit - len(PREFIX) - len(suffix)
    readable = _clean(f"{ref.namespace}-{ref.name}")[:room].rstrip("-_")
    return f"{PREFIX}{readable}{suffix}"


def function_name(ref: PodRef) -> str:
    """A Lambda function name: [A-Za-z0-9_-], at most 64 characters."""
    return resource_name(ref, LAMBDA_FUNCTION_MAX)


def task_family(ref: PodRef) -> str:
    """An ECS task definition family: [A-Za-z0-9_-], at most 255 characters."""
    return resource_name(ref, ECS_FAMILY_MAX)


def started_by(node: str) -> str:
    """The ECS `startedBy` of this node's tasks, so they can be listed cheaply."""
    return ("vkpy_" + _clean(node))[:ECS_STARTED_BY_MAX]
