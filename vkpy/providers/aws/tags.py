"""The tags that say which node and pod own an AWS resource, and labels as tags.

Every function, task definition and task vkpy creates carries the node's name and
the pod's namespace, name and UID. After a restart vkpy lists what carries its node
tag to adopt it, and removes what no pod owns any more; a resource without these
tags was not made by vkpy and is never touched. Pod labels are copied as tags too
(as far as AWS's tag rules allow), so AWS-side cost reports and searches can use them.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

from vkpy.providers.base import PodRef
from vkpy.providers.owner_tags import add_labels, ownership

MAX_TAGS = 50
"""AWS's limit of tags per resource (Lambda and ECS)."""

_KEY = re.compile(r"^[\w .:/=+\-@]{1,128}$")
_VALUE = re.compile(r"^[\w .:/=+\-@]{0,256}$")


def allowed(key: str, value: str) -> bool:
    """Whether AWS accepts this tag (and it is not in a reserved namespace)."""
    return (
        bool(_KEY.match(key)) and bool(_VALUE.match(value)) and not key.lower().startswith("aws:")
    )


def pod_tags(
    node: str,
    ref: PodRef,
    labels: Mapping[str, str] | None = None,
    extra: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The ownership tags, then `extra` (vkpy's own), then labels while there is room."""
    tags = ownership(node, ref)
    for key, value in (extra or {}).items():
        if allowed(key, value):
            tags[key] = value
    return add_labels(tags, labels, allowed, MAX_TAGS)


def as_list(
    tags: Mapping[str, str], key: str = "key", value: str = "value"
) -> list[dict[str, str]]:
    """Tags in the `[{"key": k, "value": v}]` shape of ECS."""
    return [{key: k, value: v} for k, v in tags.items()]


def from_list(
    items: Iterable[Mapping[str, str]] | None, key: str = "key", value: str = "value"
) -> dict[str, str]:
    return {str(t.get(key, "")): str(t.get(value, "")) for t in items or ()}


def note_value(text: str) -> str:
    """Free text made fit for a tag value (characters AWS refuses become spaces)."""
    cleaned = re.sub(r"[^\w .:/=+\-@]", " ", text)
    return re.sub(r" +", " ", cleaned).strip()[:256]
