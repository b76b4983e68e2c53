"""Names derived from pods within AWS's limits, and ownership tags."""

from __future__ import annotations

import re

from vkpy.providers import owner_tags
from vkpy.providers.aws import naming, tags
from vkpy.providers.base import PodRef


def test_function_names_fit_lambda_and_differ_per_uid() -> None:
    long = PodRef("a-very-long-namespace-name-" * 2, "and.a.long.pod.name-" * 10, "uid-1")
    name = naming.function_name(long)
    assert len(name) <= 64
    assert re.fullmatch(r"[A-Za-z0-9_-]+", name)
    assert name.startswith("vkpy-a-very-long")
    again = naming.function_name(PodRef(long.namespace, long.name, "uid-2"))
    assert again != name and len(again) == len(name)
    short = naming.function_name(PodRef("ns", "web", "u"))
    assert short.startswith("vkpy-ns-web-")


def test_task_family_and_started_by() -> None:
    family = naming.task_family(PodRef("ns", "x" * 300, "u"))
    assert len(family) <= 255
    assert naming.started_by("vk-1.example") == "vkpy_vk-1-example"


def test_ownership_round_trips_and_other_nodes_are_ignored() -> None:
    ref = PodRef("ns", "web", "u-1")
    pod_tags = tags.pod_tags("node-a", ref, {"app": "web", "bad key!": "x", "aws:x": "y"})
    assert owner_tags.owner(pod_tags, "node-a") == ref
    assert owner_tags.owner(pod_tags, "node-b") is None
    assert pod_tags["app"] == "web"
    assert "bad key!" not in pod_tags and "aws:x" not in pod_tags
    assert owner_tags.owner({owner_tags.NODE: "node-a"}, "node-a") is None


def test_labels_stop_at_aws_tag_limit_and_never_override_ownership() -> None:
    ref = PodRef("ns", "web", "u-1")
    labels = {f"l{i:02d}": "v" for i in range(80)} | {owner_tags.UID: "forged"}
    pod_tags = tags.pod_tags("n", ref, labels)
    assert len(pod_tags) == tags.MAX_TAGS
    assert pod_tags[owner_tags.UID] == "u-1"


def test_note_values_are_made_fit_for_tags() -> None:
    value = tags.note_value("memory 64Mi set to 128 MB, the Lambda minimum (clamped)!")
    assert tags.allowed("k", value)
