"""A pod's own processes when vkpy runs as root (issue 12): PID namespaces.

A pod lists and signals only its own processes: the pod has one PID namespace, whose
pid 1 is its namespace holder (as with `shareProcessNamespace` on a kubelet, where
pause is pid 1), so `shareProcessNamespace` shows the sibling containers, and
`kubectl exec` and ephemeral containers (`kubectl debug --target`) enter it. Before,
every pod saw every process of the host in /proc.
"""

# ruff: noqa: F811 - pytest fixtures are imported by name and then requested as arguments
from __future__ import annotations

from typing import Any

from tests.integration.agent import Kube, wait_for
from tests.integration.process_fixtures import (  # noqa: F401 - fixtures
    StartProcessAgent,
    phase_is,
    process_pod,
    start_process_agent,
)
from tests.integration.test_process_pod_filesystem import _report

PROCESSES = "for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline; echo; done"
"""Every process the pod sees, one command line a line (what `ps` reads)."""


def _sleeper(name: str, node: str, seconds: int, **spec: Any) -> dict[str, Any]:
    return process_pod(name, node, f"exec sleep {seconds}", **spec)


def test_a_pod_sees_and_signals_only_its_own_processes(
    kube: Kube, start_process_agent: StartProcessAgent
) -> None:
    agent = start_process_agent()
    kube.create(_sleeper("other", agent.node_name, 3601))
    wait_for("other Running", lambda: phase_is(kube, "other", "Running"))
    script = (
        f"echo PID=$$$$; {PROCESSES}; "
        "pkill -f 'sleep 36[0]1' 2>/dev/null; kill -9 1 2>/dev/null; echo DONE; exec sleep 3600"
    )
    kube.create(process_pod("looker", agent.node_name, script))
    report = _report(agent, kube, "looker")
    pids = [int(x.removeprefix("PID=")) for x in report.splitlines() if x.startswith("PID=")]
    assert pids and pids[0] < 100, report  # a pid of the pod's own namespace
    assert "sleep 3601" not in report and "kube-apiserver" not in report, report
    assert phase_is(kube, "other", "Running")
    # kubectl exec enters the container's PID namespace: it sees the main process.
    seen = kube.kubectl("exec", "-n", kube.namespace, "looker", "--", "sh", "-c", PROCESSES)
    lines = [line.strip() for line in seen.splitlines() if line.strip()]
    assert "sleep 3600" in lines, seen
    assert not any("3601" in line for line in lines), seen


def test_share_process_namespace_shows_the_sibling_container(
    kube: Kube, start_process_agent: StartProcessAgent
) -> None:
    agent = start_process_agent()
    look = f"sleep 1; {PROCESSES}; echo DONE; exec sleep 3600"
    pod = process_pod("shared", agent.node_name, look, shareProcessNamespace=True)
    pod["spec"]["containers"].append(
        {"name": "sibling", "image": "busybox", "command": ["sh", "-c", "exec sleep 3602"]}
    )
    kube.create(pod)
    shared = _report(agent, kube, "shared")
    assert "sleep 3602" in shared, shared
    kube.create(process_pod("stranger", agent.node_name, look))
    stranger = _report(agent, kube, "stranger")
    assert "sleep 3602" not in stranger, stranger


def test_kubectl_debug_target_shares_the_targets_processes(
    kube: Kube, start_process_agent: StartProcessAgent
) -> None:
    agent = start_process_agent()
    kube.create(_sleeper("target", agent.node_name, 3603))
    wait_for("target Running", lambda: phase_is(kube, "target", "Running"))
    kube.kubectl(
        *("debug", "-n", kube.namespace, "target", "--image=busybox"),
        *("--target=app", "--container=dbg", "--", "sh", "-c", PROCESSES),
    )

    def ended() -> Any:
        for status in (kube.get("pod", "target") or {}).get("status", {}).get(
            "ephemeralContainerStatuses"
        ) or []:
            if status["name"] == "dbg":
                return status.get("state", {}).get("terminated")
        return None

    wait_for("the debug container to end", ended, timeout=120)
    logs = kube.kubectl("logs", "-n", kube.namespace, "target", "-c", "dbg")
    assert "sleep 3603" in logs, logs
