"""Init containers as the kubelet reports them, over the pod's whole life (issue 18).

The upstream InitContainer specs watch the pod and check every version: app
containers wait with reason PodInitializing until initialization is done, an init
container not started yet waits with PodInitializing too, a completed init container
is ready, and the Initialized condition names the incomplete ones in the kubelet's
words. These tests check the same on the process backend.
"""

# ruff: noqa: F811 - pytest fixtures are imported by name and then requested as arguments
from __future__ import annotations

from typing import Any

from tests.integration.agent import Kube, wait_for
from tests.integration.pod_watch import PodWatch
from tests.integration.process_fixtures import (  # noqa: F401 - fixtures
    StartProcessAgent,
    phase_is,
    process_pod,
    start_process_agent,
    status_of,
)


def _init(name: str, script: str) -> dict[str, Any]:
    return {"name": name, "image": "busybox:1.36", "command": ["sh", "-c", script]}


def _condition(pod: dict[str, Any], kind: str) -> dict[str, Any]:
    return next(c for c in pod["status"]["conditions"] if c["type"] == kind)


def _initialized(pod: dict[str, Any]) -> bool:
    statuses = pod["status"].get("initContainerStatuses") or []
    return bool(statuses) and all(
        (s["state"].get("terminated") or {}).get("exitCode", -1) == 0 for s in statuses
    )


def _check_versions(versions: list[dict[str, Any]]) -> None:
    """The upstream suite's invariants, for every version of the pod."""
    assert versions
    was_initialized = False
    for pod in versions:
        status = pod.get("status") or {}
        initialized = _initialized(pod)
        assert not (was_initialized and not initialized), "initialization regressed"
        was_initialized = initialized
        for init in status.get("initContainerStatuses") or []:
            terminated = init["state"].get("terminated")
            if terminated is not None and terminated["exitCode"] == 0:
                assert init["ready"] is True, init
            waiting = init["state"].get("waiting")
            if waiting is not None and init["restartCount"] == 0 and not init.get("lastState"):
                assert waiting.get("reason") == "PodInitializing", init
        if not initialized:
            for app in status.get("containerStatuses") or []:
                assert app["restartCount"] == 0, app
                assert (app["state"].get("waiting") or {}).get("reason") == "PodInitializing", app


def test_init_container_states_and_conditions_as_the_kubelet_reports_them(
    kube: Kube, start_process_agent: StartProcessAgent
) -> None:
    agent = start_process_agent()
    node = agent.node_name
    cluster = kube.cluster
    with (
        PodWatch(cluster, kube.namespace, "init-ok") as ok_watch,
        PodWatch(cluster, kube.namespace, "init-never") as never_watch,
        PodWatch(cluster, kube.namespace, "init-always") as always_watch,
    ):
        kube.create(
            process_pod(
                "init-ok",
                node,
                "sleep 3600",
                "Always",
                initContainers=[_init("init1", "sleep 1"), _init("init2", "sleep 1")],
            )
        )
        kube.create(
            process_pod(
                "init-never",
                node,
                "true",
                "Never",
                initContainers=[_init("init1", "sleep 1"), _init("init2", "sleep 1; exit 1")],
            )
        )
        kube.create(
            process_pod(
                "init-always",
                node,
                "sleep 3600",
                "Always",
                initContainers=[_init("init1", "sleep 1; exit 1"), _init("init2", "true")],
            )
        )

        running = wait_for("init-ok Running", lambda: phase_is(kube, "init-ok", "Running"))
        for name in ("init1", "init2"):
            init = status_of(running, name, init=True)
            assert init["ready"] is True
            assert init["state"]["terminated"]["exitCode"] == 0
        assert _condition(running, "Initialized")["status"] == "True"

        failed = wait_for("init-never Failed", lambda: phase_is(kube, "init-never", "Failed"))
        assert status_of(failed, "init1", init=True)["ready"] is True
        assert status_of(failed, "init2", init=True)["ready"] is False
        initialized = _condition(failed, "Initialized")
        assert initialized["status"] == "False"
        assert initialized["reason"] == "ContainersNotInitialized"
        assert initialized["message"] == "containers with incomplete status: [init2]"
        assert status_of(failed)["state"]["waiting"]["reason"] == "PodInitializing"

        def restarted_twice() -> dict[str, Any] | None:
            pod = kube.get("pod", "init-always")
            restarts = status_of(pod, "init1", init=True).get("restartCount", 0)
            return pod if restarts >= 2 else None

        retried = wait_for("init1 restarted twice", restarted_twice, timeout=60)
        assert retried["status"]["phase"] == "Pending"
        initialized = _condition(retried, "Initialized")
        assert initialized["status"] == "False"
        assert initialized["reason"] == "ContainersNotInitialized"
        assert initialized["message"] == "containers with incomplete status: [init1 init2]"
        ready = _condition(retried, "Ready")
        assert ready["reason"] == "ContainersNotReady"
        assert ready["message"] == "containers with unready status: [app]"

    for watch in (ok_watch, never_watch, always_watch):
        _check_versions(watch.versions())
