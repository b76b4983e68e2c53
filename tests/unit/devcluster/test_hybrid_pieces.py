"""The hybrid pool's plain-data pieces: which pods get a deletion cost, how the dev
cluster's nodes and metrics-server are started (flags that decide scheduling and
certificate checks)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from vkpy.devcluster import __main__ as devcluster_cli
from vkpy.devcluster import metrics_server, nodes, pod_network
from vkpy.devcluster.cluster_pki import ClusterPKI, names_ips, write_cluster_pki
from vkpy.devcluster.pki import CertificateAuthority, write_pem
from vkpy.node.pods.deletion_cost import ANNOTATION, wants_cost


def _pod(**meta: object) -> dict[str, object]:
    owner = {"kind": "ReplicaSet", "name": "web-1", "controller": True, "uid": "u"}
    return {"metadata": {"name": "p", "namespace": "n", "ownerReferences": [owner], **meta}}


def test_deletion_cost_only_for_live_replicaset_pods_without_one() -> None:
    assert wants_cost(_pod())
    assert not wants_cost(_pod(annotations={ANNOTATION: "5"}))
    assert not wants_cost(_pod(deletionTimestamp="2026-12-01T10:00:00Z"))
    job_owner = {"kind": "Job", "name": "j", "controller": True, "uid": "u"}
    assert not wants_cost({"metadata": {"ownerReferences": [job_owner]}})
    assert not wants_cost({"metadata": {}})


def test_worker_is_untainted_regular_pool_with_modest_capacity(tmp_path: Path) -> None:
    spec = nodes.worker(1)
    argv = spec.argv(tmp_path, tmp_path / "kubeconfig", 12345)
    assert "--taint=none" in argv
    assert f"--label={nodes.POOL_LABEL}=regular" in argv
    assert "--label=type=regular" in argv  # never selected by type=virtual-kubelet
    assert "--port=12345" in argv
    assert f"--state-dir={tmp_path / 'state'}" in argv  # the node's own directory
    assert spec.provider_config["capacity"] == {"cpu": "2", "memory": "4Gi", "pods": "10"}
    assert nodes.worker(2, gpus=1).provider_config["capacity"] == {
        "cpu": "2",
        "memory": "4Gi",
        "pods": "10",
        nodes.GPU: "1",
    }


def test_virtual_nodes_are_tainted(tmp_path: Path) -> None:
    virtual = nodes.virtual(pod_deletion_cost=-100).argv(tmp_path, tmp_path / "k", 1)
    assert "--taint=virtual-kubelet.io/provider=process:NoSchedule" in virtual
    assert "--pod-deletion-cost=-100" in virtual
    gpu = nodes.gpu_virtual()
    assert gpu.provider == "sim"
    assert gpu.provider_config["capacity"] == {nodes.GPU: "8"}


def test_metrics_server_verifies_kubelet_certificates(tmp_path: Path) -> None:
    pki = ClusterPKI(tmp_path / "pki")
    argv = metrics_server.args(Path("/bin/ms"), tmp_path, tmp_path / "kc", 4443, pki)
    assert f"--kubelet-certificate-authority={pki.kubelet_ca.cert}" in argv
    assert "--kubelet-use-node-status-port" in argv
    assert not any("insecure" in a for a in argv)
    ca = tmp_path / "ca.crt"
    ca.write_text("x")
    service, api = metrics_server.manifests(4443, ca)[-2:]
    assert service["spec"] == {"type": "ExternalName", "externalName": "localhost"}
    assert api["spec"]["service"] == {
        "name": "metrics-server",
        "namespace": "kube-system",
        "port": 4443,
    }


def test_workers_have_addresses_of_their_own_named_by_their_certificate(tmp_path: Path) -> None:
    first, second = nodes.worker(1), nodes.worker(2)
    assert first.address != second.address
    argv = second.argv(tmp_path, tmp_path / "kubeconfig", 1)
    assert f"--node-ip={second.address}" in argv
    assert f"--listen-address={second.address}" in argv
    pki = write_cluster_pki(tmp_path / "pki")
    cert = nodes.issue_serving_cert(second.name, tmp_path / "n", pki, second.address)
    assert nodes._names_ips(cert.cert, (second.address, "127.0.0.1"))


def test_process_workers_can_host_the_chart(monkeypatch: pytest.MonkeyPatch) -> None:
    """As root a worker runs images through runc, each pod on a network of its own whose
    pods reach the API server at the relay's address on the API server's port; no
    host program stands in for any image."""
    monkeypatch.setattr(nodes.os, "geteuid", lambda: 0)
    worker = nodes.worker(1)
    config = nodes.provider_config(worker, "https://127.0.0.1:6443", pod_cidr="10.244.3.0/24")
    assert config["runtime"] == "oci" and config["network"] == "pod"
    assert config["pod_cidr"] == "10.244.3.0/24"
    assert config["kubernetes_service_host"] == pod_network.API_ADDRESS
    assert config["kubernetes_service_port"] == 6443
    assert "images" not in config
    mine = replace(worker, provider_config={**worker.provider_config, "pod_cidr": "10.9.0.0/24"})
    assert nodes.provider_config(mine, "https://x:1", pod_cidr="10.244.3.0/24")["pod_cidr"] == (
        "10.9.0.0/24"
    )
    # pods on the host's network reach the API server on loopback, as before
    monkeypatch.setattr(nodes.os, "geteuid", lambda: 1000)
    plain = nodes.provider_config(nodes.worker(1), "https://127.0.0.1:6443")
    assert "runtime" not in plain and plain["kubernetes_service_host"] == "127.0.0.1"
    assert "kubernetes_service_host" not in nodes.provider_config(
        nodes.gpu_virtual(), "https://x:1"
    )


def test_an_older_pki_gets_the_address_and_keeps_its_identity(tmp_path: Path) -> None:
    """A cluster directory made before the address existed: its API server certificate
    is issued again by the same CA; the CA and the service-account key stay."""
    pki = write_cluster_pki(tmp_path / "pki")
    ca, sa = pki.ca.cert.read_bytes(), pki.service_account_key.read_bytes()
    authority = CertificateAuthority.load(pki.ca.cert, pki.ca.key)
    old_cert, old_key = authority.issue(
        "kube-apiserver", ip_addresses=("127.0.0.1",), dns_names=("localhost",), server=True
    )
    write_pem(pki.apiserver.cert, old_cert)
    write_pem(pki.apiserver.key, old_key, secret=True)
    assert not names_ips(pki.apiserver.cert, (pod_network.API_ADDRESS,))
    write_cluster_pki(tmp_path / "pki")
    assert names_ips(pki.apiserver.cert, (pod_network.API_ADDRESS, "127.0.0.1"))
    assert pki.ca.cert.read_bytes() == ca and pki.service_account_key.read_bytes() == sa


def test_run_keeps_its_one_virtual_node_unless_asked_for_workers() -> None:
    """`make run` passes `--workers ${WORKERS:-0}`: no regular pool unless asked."""
    parse = devcluster_cli._parser().parse_args
    plain = parse(["run"])
    assert devcluster_cli.pool_specs(plain.workers, plain.gpu_workers) == []
    asked = parse(["run", "--workers", "2", "--gpu-workers", "1"])
    pool = devcluster_cli.pool_specs(asked.workers, asked.gpu_workers)
    assert [s.name for s in pool] == ["vkpy-worker-1", "vkpy-worker-2"]
    assert [nodes.GPU in s.provider_config["capacity"] for s in pool] == [False, True]
