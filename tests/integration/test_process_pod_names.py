"""A pod's hostname and sysctls on the process backend, as a user checks them inside
the pod (issue 18): `hostnameOverride` is the pod's hostname and its `hostname -f`,
`setHostnameAsFQDN` makes the hostname the pod's FQDN, a safe sysctl is set in the
pod's own IPC namespace (the host's value unchanged), and a network sysctl on a node
whose pods share its network is refused with `SysctlForbidden` rather than written
into the host. Each failed before: the hostname was the pod's name, sysctls were
never set.
"""

# ruff: noqa: F811 - pytest fixtures are imported by name and then requested as arguments
from __future__ import annotations

from pathlib import Path

from tests.integration.agent import Kube, wait_for
from tests.integration.process_fixtures import (  # noqa: F401 - fixtures
    StartProcessAgent,
    phase_is,
    process_pod,
    reachable_pods_dir,
    start_process_agent,
)

SHM_RMID_FORCED = Path("/proc/sys/kernel/shm_rmid_forced")


def _output(kube: Kube, name: str) -> str:
    pod = wait_for(f"{name} Succeeded", lambda: phase_is(kube, name, "Succeeded"), timeout=120)
    assert pod is not None
    return kube.kubectl("logs", "-n", kube.namespace, name).strip()


def test_hostname_override_and_fqdn_are_what_the_pod_sees(
    kube: Kube, start_process_agent: StartProcessAgent, reachable_pods_dir: Path
) -> None:
    agent = start_process_agent(config={"pods_dir": str(reachable_pods_dir)})
    report = "echo $(hostname)';'$(hostname -f)';'$HOSTNAME"
    pods = {
        "override": {"hostnameOverride": "override.example.host", "subdomain": "t"},
        "fqdn": {"hostname": "custom", "subdomain": "t", "setHostnameAsFQDN": True},
    }
    for name, spec in pods.items():
        kube.create(process_pod(name, agent.node_name, report, **spec))
    assert _output(kube, "override") == (
        "override.example.host;override.example.host;override.example.host"
    )
    fqdn = f"custom.t.{kube.namespace}.svc.cluster.local"
    assert _output(kube, "fqdn") == f"{fqdn};{fqdn};{fqdn}"


def test_a_safe_sysctl_is_set_in_the_pods_namespace_and_a_hosts_one_refused(
    kube: Kube, start_process_agent: StartProcessAgent, reachable_pods_dir: Path
) -> None:
    agent = start_process_agent(config={"pods_dir": str(reachable_pods_dir)})
    host_value = SHM_RMID_FORCED.read_text().strip()
    wanted = "0" if host_value == "1" else "1"
    kube.create(
        process_pod(
            "ipc",
            agent.node_name,
            "cat /proc/sys/kernel/shm_rmid_forced",
            securityContext={"sysctls": [{"name": "kernel/shm_rmid_forced", "value": wanted}]},
        )
    )
    assert _output(kube, "ipc") == wanted
    assert SHM_RMID_FORCED.read_text().strip() == host_value
    kube.create(
        process_pod(
            "net",
            agent.node_name,
            "sleep 3600",
            securityContext={
                "sysctls": [{"name": "net.ipv4.ip_unprivileged_port_start", "value": "0"}]
            },
        )
    )
    failed = wait_for("net Failed", lambda: phase_is(kube, "net", "Failed"), timeout=120)
    assert failed["status"].get("reason") == "SysctlForbidden", failed["status"]
