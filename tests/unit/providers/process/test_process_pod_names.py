"""A pod's hostname, its /etc/hosts and its sysctls on the process backend, as the
kubelet derives them (issue 18: `hostnameOverride` gave the pod's name, a
`setHostnameAsFQDN` pod its short name, and sysctls were never set)."""

from __future__ import annotations

from typing import Any

from vkpy.providers.base import PodConfig, PodRef
from vkpy.providers.process import namespaces, sandbox, sysctls


def _pod(**spec: Any) -> PodConfig:
    return PodConfig(
        ref=PodRef("team", "web-0", "uid-1"),
        pod={"metadata": {"name": "web-0", "namespace": "team"}, "spec": spec},
        init_containers=(),
        containers=(),
    )


def _own_line(pod: PodConfig) -> str:
    lines = sandbox.hosts_file(pod, "10.244.0.7").splitlines()
    return next(line for line in lines if line.startswith("10.244.0.7"))


def test_hostname_override_is_the_whole_hostname_and_the_hosts_entry() -> None:
    for spec in (
        {"hostnameOverride": "override.example.host"},
        {"hostnameOverride": "override.example.host", "hostname": "custom", "subdomain": "t"},
    ):
        pod = _pod(**spec)
        assert namespaces.hostname(pod.pod["spec"], "web-0", "team") == "override.example.host"
        assert _own_line(pod) == "10.244.0.7\toverride.example.host"


def test_hostname_and_subdomain_give_the_fqdn_first() -> None:
    pod = _pod(hostname="custom", subdomain="t")
    assert namespaces.hostname(pod.pod["spec"], "web-0", "team") == "custom"
    assert _own_line(pod) == "10.244.0.7\tcustom.t.team.svc.cluster.local\tcustom"
    assert _own_line(_pod()) == "10.244.0.7\tweb-0"


def test_set_hostname_as_fqdn_makes_the_kernel_hostname_the_fqdn() -> None:
    spec = {"subdomain": "t", "setHostnameAsFQDN": True}
    assert namespaces.hostname(spec, "web-0", "team") == "web-0.t.team.svc.cluster.local"
    assert namespaces.hostname({"setHostnameAsFQDN": True}, "web-0", "team") == "web-0"


def test_a_long_name_is_cut_as_the_kubelet_cuts_it() -> None:
    name = "a" * 62 + "-b"
    assert namespaces.hostname({}, name, "team") == "a" * 62


def test_sysctls_go_to_the_pods_own_ipc_and_network_namespaces() -> None:
    spec = {
        "securityContext": {
            "sysctls": [
                {"name": "kernel/shm_rmid_forced", "value": "1"},
                {"name": "net.ipv4.conf.eth0/100.rp_filter", "value": "0"},
            ]
        }
    }
    assert [sysctls.proc_path(n) for n, _ in sysctls.requested(spec)] == [
        "kernel/shm_rmid_forced",
        "net/ipv4/conf/eth0.100/rp_filter",
    ]
    assert sysctls.refusal(spec, ("uts", "ipc", "net")) is None
    shared_network = sysctls.refusal(spec, ("uts", "ipc"))
    assert shared_network is not None and "net.ipv4.conf.eth0/100.rp_filter" in shared_network


def test_a_sysctl_outside_the_pods_namespaces_is_refused() -> None:
    for name in ("vm.overcommit_memory", "kernel.hostname/../x", "kernel.domainname"):
        spec = {"securityContext": {"sysctls": [{"name": name, "value": "1"}]}}
        assert sysctls.refusal(spec, ("uts", "ipc", "net")) is not None, name


def test_the_kubernetes_service_is_named_in_the_hosts_file_when_it_has_an_address() -> None:
    """No cluster DNS: `https://kubernetes.default.svc` (a kubeconfig in a pod) resolves
    through /etc/hosts to `kubernetes_service_host`."""
    hosts = sandbox.hosts_file(_pod(), "10.244.0.7", "10.0.0.1").splitlines()
    assert hosts[0] == "# Kubernetes-managed hosts file."
    names = next(line for line in hosts if line.startswith("10.0.0.1")).split("\t")
    assert names[1:] == [
        "kubernetes",
        "kubernetes.default",
        "kubernetes.default.svc",
        "kubernetes.default.svc.cluster.local",
    ]
    named = sandbox.hosts_file(_pod(), "10.244.0.7", "api.example.com")
    assert "kubernetes.default" not in named


def test_a_host_network_pod_gets_the_nodes_hosts_file_with_its_aliases() -> None:
    """As the kubelet does for hostNetwork pods: the node's /etc/hosts under a header
    of its own (not the pod-network one, which tools read as 'built from the pod IP'),
    then the pod's hostAliases."""
    node_hosts = "127.0.0.1\tlocalhost\n10.1.2.3\tbuild-host\n"
    pod = _pod(hostNetwork=True, hostAliases=[{"ip": "123.45.67.89", "hostnames": ["foo", "bar"]}])
    lines = sandbox.host_network_hosts_file(pod, node_hosts).splitlines()
    assert lines[0] == "# Kubernetes-managed hosts file (host network)."
    assert lines[1:3] == ["127.0.0.1\tlocalhost", "10.1.2.3\tbuild-host"]
    assert lines[-2:] == ["# Entries added by HostAliases.", "123.45.67.89\tfoo\tbar"]
    plain = sandbox.host_network_hosts_file(_pod(hostNetwork=True), "10.1.2.3\tbuild-host")
    assert plain.splitlines()[1:] == ["10.1.2.3\tbuild-host"]
