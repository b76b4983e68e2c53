"""Volumes follow their sources while the pod runs, as with the kubelet: a changed
ConfigMap or Secret (also one that appears later for an `optional` volume) and
changed labels in a downward API volume reach the running container's files,
without a restart. Before, only service account tokens were ever rewritten."""

# ruff: noqa: F811 - pytest fixtures are imported by name and then requested as arguments
from __future__ import annotations

import json

from tests.integration.agent import Kube, wait_for
from tests.integration.process_fixtures import (  # noqa: F401 - fixtures
    StartProcessAgent,
    phase_is,
    process_pod,
    start_process_agent,
    status_of,
)


def test_changed_sources_reach_the_running_pods_volumes(
    kube: Kube, start_process_agent: StartProcessAgent
) -> None:
    agent = start_process_agent(args=["--volume-sync-period=2"])
    ns = kube.namespace
    kube.kubectl("create", "configmap", "conf", "--from-literal=key=one", "-n", ns)
    mounts = [
        {"name": "conf", "mountPath": "/conf"},
        {"name": "proj", "mountPath": "/proj"},
        {"name": "info", "mountPath": "/info"},
        {"name": "late", "mountPath": "/late"},
    ]
    volumes = [
        {"name": "conf", "configMap": {"name": "conf"}},
        {"name": "proj", "projected": {"sources": [{"configMap": {"name": "conf"}}]}},
        {
            "name": "info",
            "downwardAPI": {
                "items": [{"path": "labels", "fieldRef": {"fieldPath": "metadata.labels"}}]
            },
        },
        {"name": "late", "secret": {"secretName": "late", "optional": True}},
    ]
    kube.create(
        process_pod(
            "follows", agent.node_name, "sleep 3600", container={"volumeMounts": mounts},
            volumes=volumes,
        )
    )  # fmt: skip
    wait_for("Running", lambda: phase_is(kube, "follows", "Running"))

    def read(path: str) -> str:
        got = kube.kubectl(
            "exec", "-n", ns, "follows", "--", "sh", "-c", f"cat {path} 2>/dev/null || true"
        )
        return got.strip()

    assert read("/conf/key") == "one" and read("/proj/key") == "one"
    assert read("/late/pw") == ""
    changed = {"data": {"key": "two"}}
    kube.kubectl("patch", "configmap", "conf", "-n", ns, "-p", json.dumps(changed))
    kube.kubectl("create", "secret", "generic", "late", "--from-literal=pw=s3cret", "-n", ns)
    kube.kubectl("label", "pod", "follows", "-n", ns, "color=red")
    wait_for("the ConfigMap's new value", lambda: read("/conf/key") == "two", timeout=60)
    wait_for("the projected ConfigMap's", lambda: read("/proj/key") == "two", timeout=60)
    wait_for("the optional Secret, created", lambda: read("/late/pw") == "s3cret", timeout=60)
    wait_for("the new label", lambda: 'color="red"' in read("/info/labels"), timeout=60)
    kube.kubectl("delete", "secret", "late", "-n", ns)
    wait_for("the optional Secret, deleted", lambda: read("/late/pw") == "", timeout=60)
    assert status_of(kube.get("pod", "follows")).get("restartCount", 0) == 0
