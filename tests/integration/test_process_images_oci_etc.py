"""/etc/hosts, /etc/hostname and /etc/resolv.conf in `runtime: oci` pods, as the
kubelet manages them: read inside busybox containers run by runc from a real
registry, on a real vkpy node of the local control plane."""

# ruff: noqa: F811 - pytest fixtures are imported by name and then requested as arguments
from __future__ import annotations

from pathlib import Path

from tests.integration.agent import Kube, wait_for
from tests.integration.oci_fixtures import (  # noqa: F401 - registry: a fixture
    ROOT_ONLY,
    busybox_pod,
    logs,
    oci_config,
    registry,
)
from tests.integration.process_fixtures import (  # noqa: F401 - fixtures
    StartProcessAgent,
    reachable_pods_dir,
    start_process_agent,
)
from tests.registry import Registry

pytestmark = ROOT_ONLY

SHOW = (
    "cat /etc/hosts; echo ---; cat /etc/hostname; echo ---; cat /etc/resolv.conf; echo ---; "
    "hostname; echo '10.4.4.4 added' >> /etc/hosts && echo wrote-hosts; "
    "echo nameserver 1.1.1.1 >> /etc/resolv.conf && echo wrote-resolv; echo done; sleep 3600"
)


def sections(text: str) -> list[str]:
    return text.split("---\n")


def test_hosts_hostname_and_resolv_conf_follow_the_pod_spec(
    kube: Kube,
    start_process_agent: StartProcessAgent,
    registry: Registry,
    reachable_pods_dir: Path,
) -> None:
    agent = start_process_agent(oci_config(registry, reachable_pods_dir))
    image = f"{registry.host}/library/busybox:latest"
    manifest = busybox_pod("named-pod", agent.node_name, image, command=["sh", "-c", SHOW])
    manifest["spec"]["containers"].append(
        {
            "name": "locked",
            "image": image,
            "command": ["sh", "-c", SHOW],
            "securityContext": {"readOnlyRootFilesystem": True},
        }
    )
    manifest["spec"].update(
        hostname="web-0",
        subdomain="peers",
        hostAliases=[{"ip": "10.1.2.3", "hostnames": ["foo.local", "bar"]}],
        dnsPolicy="None",
        dnsConfig={
            "nameservers": ["10.9.9.9", "10.9.9.10"],
            "searches": ["a.example", "b.example"],
            "options": [{"name": "ndots", "value": "2"}, {"name": "edns0"}],
        },
    )
    created = kube.create(manifest)
    uid = created["metadata"]["uid"]
    wait_for("named-pod Running", lambda: kube.phase("named-pod") == "Running", timeout=60)
    wait_for("its output", lambda: "done" in logs(kube, "named-pod"), timeout=30)
    pod = kube.get("pod", "named-pod")
    assert pod is not None
    ip = pod["status"]["podIP"]
    hosts, hostname, resolv, rest = sections(logs(kube, "named-pod"))
    fqdn = f"web-0.peers.{kube.namespace}.svc.cluster.local"
    assert "127.0.0.1\tlocalhost" in hosts.splitlines()
    assert f"{ip}\t{fqdn}\tweb-0" in hosts.splitlines()
    assert "10.1.2.3\tfoo.local\tbar" in hosts.splitlines()
    assert hostname == "web-0\n"
    assert resolv.splitlines() == [
        "search a.example b.example",
        "nameserver 10.9.9.9",
        "nameserver 10.9.9.10",
        "options ndots:2 edns0",
    ]
    # The kubelet's hosts file is the container's to change; so is resolv.conf.
    assert rest.splitlines()[:3] == ["web-0", "wrote-hosts", "wrote-resolv"]
    # Under readOnlyRootFilesystem resolv.conf is read-only (/etc/hosts still is not).
    got = kube.cluster.run_kubectl(
        "-n", kube.namespace, "logs", "named-pod", "-c", "locked", check=False
    ).stdout
    assert "wrote-hosts" in got and "wrote-resolv" not in got and "done" in got
    # One file per pod: the other container's addition is seen from this one.
    shown = kube.kubectl("-n", kube.namespace, "exec", "named-pod", "--", "cat", "/etc/hosts")
    assert shown.count("10.4.4.4 added") == 2
    # Never the host's files: they are the node's, untouched.
    assert "10.4.4.4 added" not in Path("/etc/hosts").read_text()
    assert (reachable_pods_dir / uid / "etc-hosts").read_text() == shown
    assert not [e for e in kube.events("named-pod") if e["reason"] == "MissingClusterDNS"]
    kube.kubectl("-n", kube.namespace, "delete", "pod", "named-pod", "--wait=true")


def test_default_dns_policy_uses_the_nodes_resolv_conf_unless_a_volume_is_mounted_there(
    kube: Kube,
    start_process_agent: StartProcessAgent,
    registry: Registry,
    reachable_pods_dir: Path,
) -> None:
    agent = start_process_agent(oci_config(registry, reachable_pods_dir))
    image = f"{registry.host}/library/busybox:latest"
    kube.create(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "dns"},
            "data": {"resolv.conf": "nameserver 10.7.7.7\n"},
        }
    )
    show = "cat /etc/resolv.conf; echo ---; cat /etc/hostname; echo done; sleep 3600"
    manifest = busybox_pod("plain", agent.node_name, image, command=["sh", "-c", show])
    manifest["spec"]["dnsConfig"] = {"searches": ["extra.example"]}
    manifest["spec"]["containers"].append(
        {
            "name": "own",
            "image": image,
            "command": ["sh", "-c", show],
            "volumeMounts": [
                {"name": "dns", "mountPath": "/etc/resolv.conf", "subPath": "resolv.conf"}
            ],
        }
    )
    manifest["spec"]["volumes"] = [{"name": "dns", "configMap": {"name": "dns"}}]
    kube.create(manifest)
    wait_for("plain Running", lambda: kube.phase("plain") == "Running", timeout=60)
    wait_for("its output", lambda: "done" in logs(kube, "plain"), timeout=30)
    resolv, hostname = sections(logs(kube, "plain"))
    node = [
        line.split()[1]
        for line in Path("/etc/resolv.conf").read_text().splitlines()
        if line.startswith("nameserver ")
    ]
    assert [line.split()[1] for line in resolv.splitlines() if line.startswith("nameserver")] == (
        node[:3]
    )
    search = [line for line in resolv.splitlines() if line.startswith("search ")]
    assert len(search) == 1 and search[0].split()[-1] == "extra.example"
    assert hostname.splitlines()[0] == "plain"
    own = kube.cluster.run_kubectl(
        "-n", kube.namespace, "logs", "plain", "-c", "own", check=False
    ).stdout
    assert sections(own)[0] == "nameserver 10.7.7.7\n"
    # ClusterFirst (the default) without a cluster DNS: the kubelet's Warning, once.
    missing = [e for e in kube.events("plain") if e["reason"] == "MissingClusterDNS"]
    assert len(missing) == 1 and missing[0]["type"] == "Warning"
    assert (missing[0].get("count") or 1) == 1
    assert 'Falling back to "Default" policy.' in missing[0]["message"]
    kube.kubectl("-n", kube.namespace, "delete", "pod", "plain", "--wait=true")
