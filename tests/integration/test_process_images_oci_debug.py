"""`kubectl debug` on a `runtime: oci` node, through the real API server and kubectl.

The debug container runs its own image (busybox from the test registry) in the pod's
sandbox namespaces (user, network, IPC, UTS) and, with `--target`, in its target's
PID namespace: `ps` shows the target's process, the hostname is the pod's, root in it
is the pod's mapped root; `kubectl debug -i` attaches to it, its end is reported in
`ephemeralContainerStatuses` and its log is kept.
"""

# ruff: noqa: F811 - pytest fixtures are imported by name and then requested as arguments
from __future__ import annotations

import subprocess
import threading
from pathlib import Path

from tests.integration.agent import Kube, wait_for
from tests.integration.oci_fixtures import (  # noqa: F401 - registry: a fixture
    ROOT_ONLY,
    busybox_pod,
    container_pid,
    host_uid,
    oci_config,
    registry,
)
from tests.integration.process_fixtures import (  # noqa: F401 - fixtures
    StartProcessAgent,
    reachable_pods_dir,
    start_process_agent,
)
from tests.integration.stream_helpers import start_kubectl
from tests.integration.test_debug import ephemeral_status
from tests.integration.test_kubelet_parity_ephemeral import add_debugger
from tests.registry import Registry

pytestmark = ROOT_ONLY


def debug_session(
    kube: Kube, pod: str, image: str, options: list[str], script: str
) -> tuple[subprocess.Popen[bytes], str]:
    """`kubectl debug -i` running `sh -c script`, which first reads a line (so that
    kubectl is attached before it prints) and ends printing the hostname (`pod`); stdin
    stays open until then, as without stdinOnce its end would end the session."""
    client = start_kubectl(
        kube.cluster,
        *("debug", "-i", "-n", kube.namespace, pod, f"--image={image}", *options),
        *("--", "sh", "-c", script),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert client.stdin is not None and client.stdout is not None
    timer = threading.Timer(120, client.kill)
    timer.start()
    lines: list[bytes] = []
    try:
        client.stdin.write(b"typed\n")
        client.stdin.flush()
        while line := client.stdout.readline():
            lines.append(line)
            if line.strip() == pod.encode():  # the hostname: the last line
                break
        client.stdin.close()
        client.wait()
    finally:
        timer.cancel()
        client.kill()
    return client, b"".join(lines).decode()


def test_kubectl_debug_joins_the_targets_namespaces_with_its_own_image(
    kube: Kube,
    start_process_agent: StartProcessAgent,
    registry: Registry,
    reachable_pods_dir: Path,
) -> None:
    agent = start_process_agent(oci_config(registry, reachable_pods_dir))
    image = f"{registry.host}/library/busybox:latest"
    target = busybox_pod("box", agent.node_name, image, command=["sleep", "3601"])
    created = kube.create(target)
    uid = created["metadata"]["uid"]
    wait_for("box Running", lambda: kube.phase("box") == "Running", timeout=60)
    target_pid = container_pid(agent, f"vkpy-{uid}-app-0")

    script = (
        'read -r line; echo "got $line"; ps -o pid,args; echo "uid $(id -u)"; '
        "grep CapEff /proc/self/status; hostname"
    )
    client, text = debug_session(kube, "box", image, ["--target=app", "--container=dbg"], script)
    assert client.stderr is not None
    assert "got typed\n" in text, (text, client.stderr.read())
    # The target's PID namespace: its sleep is pid 1 there, beside the debug shell.
    processes = [line.split(None, 1) for line in text.splitlines() if line[:1].isspace()]
    assert ["1", "sleep 3601"] in [[p[0], p[1].strip()] for p in processes if len(p) == 2]
    assert "uid 0\n" in text
    # kubectl debug's default profile (general) adds SYS_PTRACE: runc grants it, in
    # the pod's user namespace, as to any container of the pod.
    effective = next(line.split()[1] for line in text.splitlines() if line.startswith("CapEff"))
    assert int(effective, 16) & (1 << 19)  # CAP_SYS_PTRACE
    assert not [e for e in kube.events("box") if e["reason"] == "CapabilitiesNotGranted"]
    assert client.returncode == 0

    terminated = wait_for(
        "the debug container to end",
        lambda: ephemeral_status(kube, "box", "dbg").get("state", {}).get("terminated"),
        timeout=30,
    )
    assert terminated["exitCode"] == 0
    status = ephemeral_status(kube, "box", "dbg")
    assert status["imageID"].startswith(f"{registry.host}/library/busybox@sha256:")
    logs = kube.kubectl("logs", "-n", kube.namespace, "box", "-c", "dbg")
    assert logs.startswith("got typed\n")
    # The target ran on, untouched; its root in the pod is still a mapped id on the host.
    assert kube.phase("box") == "Running"
    assert container_pid(agent, f"vkpy-{uid}-app-0") == target_pid
    assert host_uid(target_pid) >= 1_000_000
    kube.kubectl("-n", kube.namespace, "delete", "pod", "box", "--wait=true", "--timeout=60s")
    wait_for("nothing left", lambda: not (reachable_pods_dir / uid).exists(), timeout=30)


def test_kubectl_debug_without_a_target_has_a_process_namespace_of_its_own(
    kube: Kube,
    start_process_agent: StartProcessAgent,
    registry: Registry,
    reachable_pods_dir: Path,
) -> None:
    agent = start_process_agent(oci_config(registry, reachable_pods_dir))
    image = f"{registry.host}/library/busybox:latest"
    kube.create(busybox_pod("lone", agent.node_name, image, command=["sleep", "3602"]))
    wait_for("lone Running", lambda: kube.phase("lone") == "Running", timeout=60)
    script = 'read -r line; echo "got $line"; ps -o args; hostname'
    client, out = debug_session(kube, "lone", image, ["--container=solo"], script)
    assert client.stderr is not None
    assert "got typed" in out and "lone" in out.splitlines(), (out, client.stderr.read())
    assert "sleep 3602" not in out
    terminated = wait_for(
        "the debug container to end",
        lambda: ephemeral_status(kube, "lone", "solo").get("state", {}).get("terminated"),
        timeout=30,
    )
    assert terminated["exitCode"] == 0
    # The sysadmin profile asks for a privileged container: this node does not allow it.
    kube.kubectl(
        *("debug", "-n", kube.namespace, "lone", f"--image={image}", "--profile=sysadmin"),
        *("--container=admin", "--", "true"),
    )
    refused = wait_for(
        "the privileged debug container refused",
        lambda: ephemeral_status(kube, "lone", "admin").get("state", {}).get("terminated"),
        timeout=30,
    )
    assert refused["reason"] == "ContainerCannotRun"
    assert "privileged" in refused["message"] and "does not list privileged" in refused["message"]
    assert kube.phase("lone") == "Running"
    kube.kubectl("-n", kube.namespace, "delete", "pod", "lone", "--wait=true", "--timeout=60s")


def test_an_ephemeral_container_with_a_terminal_runs_and_takes_exec(
    kube: Kube,
    start_process_agent: StartProcessAgent,
    registry: Registry,
    reachable_pods_dir: Path,
) -> None:
    """The conformance spec's ephemeral container (stdin and tty, no target), added
    through the pod's ephemeralcontainers subresource: it runs, `kubectl exec` reaches
    it and its terminal's output is its log."""
    agent = start_process_agent(oci_config(registry, reachable_pods_dir))
    image = f"{registry.host}/library/busybox:latest"
    kube.create(busybox_pod("held", agent.node_name, image, command=["sleep", "3603"]))
    wait_for("held Running", lambda: kube.phase("held") == "Running", timeout=60)
    pod = kube.get("pod", "held")
    assert pod is not None
    add_debugger(kube, pod, image)
    wait_for(
        "debugger running",
        lambda: "running" in ephemeral_status(kube, "held", "debugger").get("state", {}),
        timeout=60,
    )
    out = kube.kubectl(
        "exec", "-n", kube.namespace, "held", "-c", "debugger", "--", "echo", "marco"
    )
    assert "marco" in out
    wait_for(
        "polo in its log",
        lambda: "polo" in kube.kubectl("logs", "-n", kube.namespace, "held", "-c", "debugger"),
        timeout=30,
    )
    assert "running" in ephemeral_status(kube, "held", "debugger").get("state", {})
