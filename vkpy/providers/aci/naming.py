"""Container group names and the tags that say which node and pod own a group.

A group's name is derived from its pod (namespace, name and a piece of the UID), so
it fits ACI's rules (lower case letters, digits and '-', at most 63 characters) and a
pod recreated under the same name gets a different group. Every group carries the
node's name and the pod's namespace, name and UID as tags: after a restart vkpy lists
the groups tagged with its node to adopt them and removes those no pod owns; a group
without these tags was not made by vkpy and is never touched. Pod labels are copied
as tags as far as ARM's tag rules allow.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from vkpy.providers.base import PodRef
from vkpy.providers.owner_tags import add_labels, ownership

MAX_TAGS = 50
"""ARM's limit of tags per resource."""
_BAD_KEY = re.compile(r"[<>%&\\?]")


def group_name(ref: PodRef) -> str:
    """`<namespace>-<name>-<uid8>`, cut and cleaned to ACI's naming rules."""
    suffix = re.sub(r"[^a-z0-9]", "", ref.uid.lower())[:8] or "0"
    base = re.sub(r"[^a-z0-9-]+", "-", f"{ref.namespace}-{ref.name}".lower())
    base = re.sub(r"-{2,}", "-", base).strip("-")[: 63 - len(suffix) - 1].rstrip("-")
    return f"{base}-{suffix}" if base else suffix


def allowed(key: str, value: str) -> bool:
    return 0 < len(key) <= 512 and len(value) <= 256 and not _BAD_KEY.search(key)


def pod_tags(node: str, ref: PodRef, labels: Mapping[str, str] | None = None) -> dict[str, str]:
    """The ownership tags, then the pod's labels while there is room."""
    return add_labels(ownership(node, ref), labels, allowed, MAX_TAGS)
