"""charts/vkpy with a real helm (v3, built from its Go module) and the real API server.

- `helm lint` passes, and the values schema refuses bad values with a message that
  names the value;
- `helm template` for every provider and serving-certificate mode renders objects the
  API server accepts (`kubectl apply --dry-run=server`), the ACI install command from
  the docs works unchanged, and the pod is hardened as the values promise;
- least privilege: the chart's ServiceAccount and RBAC are created for real, and vkpy
  runs with nothing but that ServiceAccount's token (a kubeconfig from a TokenRequest):
  it registers its node, leads on its leader Lease in the release's namespace (apart
  from the node's heartbeat Lease), gets its serving certificate by CSR (approved by
  the chart's approver, itself running with only its own ServiceAccount), runs a pod
  with ConfigMap, Secret and token volumes, and `kubectl logs` reaches it; nothing it
  does is refused, and what it does not need it cannot do;
- the leader Lease is never the node's Lease, whatever the node's name (issue 27).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.integration.agent import Agent, Kube, pod_identity, sim_pod, wait_for
from vkpy.devcluster import ClusterAccess
from vkpy.devcluster.binaries import tool_dir
from vkpy.devcluster.state import free_port_range
from vkpy.fleet import node_set
from vkpy.node.settings import NodeSettings, PodControllerSettings
from vkpy.providers import registry

CHART = Path(__file__).resolve().parents[2] / "charts" / "vkpy"
PROVIDERS = ["process", "sim", "lambda", "fargate", "azure", "aci"]
NOT_IN_THIS_CLUSTER = {"Certificate", "ServiceMonitor"}  # CRDs of cert-manager, prometheus-operator
AZURE_MINIMUM = [
    "--set", "providers.azure.subscriptionId=s",
    "--set", "providers.azure.resourceGroup=rg",
    "--set", "providers.azure.location=westus",
]  # fmt: skip
ACI_INSTALL = [
    "--set", "provider=azure",
    "--set", "providers.azure.clientId=11111111-2222-3333-4444-555555555555",
    "--set", "providers.azure.clientSecret=s3cr3t",
    "--set", "providers.azure.tenantId=tenant-1",
    "--set", "providers.azure.subscriptionId=sub-1",
    "--set", "providers.azure.resourceGroup=rg-1",
    "--set", "providers.azure.location=eastus",
]  # fmt: skip


@pytest.fixture(scope="module")
def helm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[str]]:
    """argv prefix for the pinned helm, with its own empty home."""
    home = tmp_path_factory.mktemp("helm-home")
    env = {f"HELM_{k}_HOME": str(home / k.lower()) for k in ("CACHE", "CONFIG", "DATA")}
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    yield [str(tool_dir("helm") / "helm")]
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


def run(argv: list[str], check: bool = True) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
    if check and result.returncode != 0:
        raise AssertionError(f"{argv} failed:\n{result.stdout}\n{result.stderr}")
    return result


def template(helm: list[str], namespace: str, *args: str) -> list[dict[str, Any]]:
    out = run([*helm, "template", "vk", str(CHART), "--namespace", namespace, *args]).stdout
    return [doc for doc in yaml.safe_load_all(out) if doc]


def one(objects: list[dict[str, Any]], kind: str, suffix: str = "") -> dict[str, Any]:
    found = [o for o in objects if o["kind"] == kind and o["metadata"]["name"].endswith(suffix)]
    assert len(found) == 1, [o["metadata"]["name"] for o in found]
    return found[0]


def vkpy_container(objects: list[dict[str, Any]]) -> dict[str, Any]:
    deployment = one(objects, "Deployment", "vk-vkpy")
    container: dict[str, Any] = deployment["spec"]["template"]["spec"]["containers"][0]
    return container


def test_helm_lint_passes(helm: list[str]) -> None:
    result = run([*helm, "lint", "--strict", str(CHART)])
    assert "1 chart(s) linted, 0 chart(s) failed" in result.stdout


@pytest.mark.parametrize(
    ("values", "named"),
    [
        (["--set", "provider=openstack"], "/provider"),
        (["--set", "servingCert.mode=secret"], "/servingCert/secretName"),
        (["--set", "servingCert.mode=letsencrypt"], "/servingCert/mode"),
        (["--set", "replicaCount=0"], "/replicaCount"),
        (["--set", "taints[0].key=a", "--set", "taints[0].effect=Sometimes"], "/taints/0/effect"),
        (["--set", "logFormat=xml"], "/logFormat"),
        (["--set", "nodeName=Not_A_Name"], "/nodeName"),
        (["--set", "rbac.creat=true"], "rbac"),
        (["--set", "provider=azure"], "/providers/azure/location"),
        ([*ACI_INSTALL, "--set", "providers.azure.tenantId="], "/providers/azure/tenantId"),
        (["--set", "nodeSet.count=-1"], "/nodeSet/count"),
        (["--set", "nodeSet.groups[0].name=fixed"], "/nodeSet/groups/0/name"),
        (["--set", "nodeLeaseDuration=2"], "/nodeLeaseDuration"),
    ],
)
def test_the_schema_refuses_bad_values_naming_them(
    helm: list[str], values: list[str], named: str
) -> None:
    result = run([*helm, "template", "vk", str(CHART), *values], check=False)
    assert result.returncode != 0
    assert "values don't meet the specifications of the schema" in result.stderr
    assert named in result.stderr, result.stderr


@pytest.mark.parametrize(
    "values",
    [
        *[
            ["--set", f"provider={p}", *(AZURE_MINIMUM if p in ("azure", "aci") else [])]
            for p in PROVIDERS
        ],
        ACI_INSTALL,
        ["--set", "servingCert.mode=secret", "--set", "servingCert.secretName=vk-tls"],
        ["--set", "servingCert.mode=selfSigned", "--set", "replicaCount=3"],
        [
            "--set", "servingCert.approver.enabled=true",
            "--set", "priorityClassName=system-cluster-critical",
        ],
        [
            "--set", "servingCert.mode=certManager",
            "--set", "servingCert.certManager.issuerRef.name=kubelet-ca",
            "--set", "metrics.serviceMonitor.enabled=true",
        ],
        ["--set", "nodeSet.count=50", "--set", "replicaCount=3"],
        [
            "--set", "nodeSet.groups[0].count=2", "--set", "nodeSet.groups[0].name=a-{index}",
            "--set", "nodeSet.groups[1].names={big-0,big-1}",
            "--set", "nodeSet.groups[1].taints={dedicated=big:NoSchedule}",
        ],
    ],
    ids=[
        *PROVIDERS, "aci-install", "secret", "selfSigned-ha", "csr-approver", "certManager",
        "node-set-count", "node-set-groups",
    ],
)  # fmt: skip
def test_every_rendering_is_accepted_by_the_api_server(
    helm: list[str], kube: Kube, values: list[str]
) -> None:
    objects = template(helm, kube.namespace, *values)
    applied = [o for o in objects if o["kind"] not in NOT_IN_THIS_CLUSTER]
    kube.kubectl(
        "apply", "--dry-run=server", "-f", "-",
        input="\n---\n".join(yaml.safe_dump(o) for o in applied),
    )  # fmt: skip
    skipped = {o["kind"] for o in objects} & NOT_IN_THIS_CLUSTER
    if "servingCert.mode=certManager" in values:
        certificate = one(objects, "Certificate")
        assert certificate["spec"]["issuerRef"]["name"] == "kubelet-ca"
        assert certificate["spec"]["commonName"] == "system:node:vk-vkpy"
        assert certificate["spec"]["subject"]["organizations"] == ["system:nodes"]
        assert skipped == {"Certificate", "ServiceMonitor"}


def arg(args: list[str], flag: str) -> str:
    (value,) = [a.split("=", 1)[1] for a in args if a.startswith(f"{flag}=")]
    return value


@pytest.mark.parametrize("node_name", ["", "vk-vkpy", "edge-1"])
def test_the_leader_lease_is_never_the_node_lease(helm: list[str], node_name: str) -> None:
    """Issue 27: with nodeName at its default (the release's full name, also the
    leader Lease's name) the two Leases were one object in kube-node-lease."""
    objects = template(helm, "vk-system", "--set", f"nodeName={node_name}")
    args = vkpy_container(objects)["args"]
    node = arg(args, "--node-name")
    assert node == (node_name or "vk-vkpy")
    lease = (
        arg(args, "--leader-elect-resource-namespace"),
        arg(args, "--leader-elect-resource-name"),
    )
    assert lease == ("vk-system", "vk-vkpy") != ("kube-node-lease", node)
    # the leader's Role is in the release's namespace, for that one Lease (and create)
    role = one(objects, "Role", "-vkpy-leader")
    assert role["metadata"]["namespace"] == "vk-system"
    assert role["rules"] == [
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create"]},
        {
            "apiGroups": ["coordination.k8s.io"],
            "resources": ["leases"],
            "resourceNames": ["vk-vkpy"],
            "verbs": ["get", "update"],
        },
    ]
    # the uninstall hook deletes that Lease, not one in kube-node-lease
    hook = one(objects, "Job", "-uninstall")["spec"]["template"]["spec"]["containers"][0]
    assert arg(hook["args"], "--lease-namespace") == "vk-system"
    assert arg(hook["args"], "--lease-name") == "vk-vkpy"
    # and the serving certificate is approved without a manual step by default
    assert one(objects, "Deployment", "-approver")["spec"]["replicas"] == 1


def test_the_chart_refuses_kube_node_lease_as_its_namespace(helm: list[str]) -> None:
    result = run([*helm, "template", "vk", str(CHART), "-n", "kube-node-lease"], check=False)
    assert result.returncode != 0
    assert "install vkpy into a namespace of its own: kube-node-lease holds" in result.stderr


def test_a_node_set_takes_a_count_or_groups_not_both(helm: list[str]) -> None:
    both = ["--set", "nodeSet.count=2", "--set", "nodeSet.groups[0].count=1"]
    result = run([*helm, "template", "vk", str(CHART), *both], check=False)
    assert result.returncode != 0
    assert "nodeSet: give count or groups, not both" in result.stderr


def test_a_node_set_file_from_groups_is_what_vkpy_reads(helm: list[str], tmp_path: Path) -> None:
    objects = template(
        helm, "vk", "--set", "nodeSet.groups[0].count=2",
        "--set", "nodeSet.groups[0].name=a-{index}", "--set", "nodeSet.groups[0].labels.zone=a",
    )  # fmt: skip
    assert "--node-set=/etc/vkpy/provider/node-set.yaml" in vkpy_container(objects)["args"]
    (tmp_path / "node-set.yaml").write_text(one(objects, "ConfigMap")["data"]["node-set.yaml"])
    groups = node_set.from_file(yaml.safe_load((tmp_path / "node-set.yaml").read_text()))
    base = NodeSettings(name="vk-vkpy", internal_ip="")
    members = node_set.members(base, PodControllerSettings(node_name="", host_ip=""), {}, groups)
    assert [m.node.name for m in members] == ["a-0", "a-1"]
    assert members[0].node.labels == {"zone": "a", "vkpy.io/node-set": "vk-vkpy"}


def test_the_aci_install_command_renders_config_secret_and_env(helm: list[str]) -> None:
    objects = template(helm, "virtual-kubelet", *ACI_INSTALL)
    container = vkpy_container(objects)
    assert "--provider=azure" in container["args"]
    config = yaml.safe_load(one(objects, "ConfigMap")["data"]["provider.yaml"])
    assert config == {
        "subscription_id": "sub-1",
        "resource_group": "rg-1",
        "region": "eastus",
        "credentials": {"type": "client_secret"},
    }
    secret = one(objects, "Secret")
    assert secret["stringData"] == {"clientSecret": "s3cr3t"}
    env = {e["name"]: e for e in container["env"]}
    assert env["AZURE_CLIENT_ID"]["value"] == "11111111-2222-3333-4444-555555555555"
    assert env["AZURE_TENANT_ID"]["value"] == "tenant-1"
    assert (
        env["AZURE_CLIENT_SECRET"]["valueFrom"]["secretKeyRef"]["name"]
        == secret["metadata"]["name"]
    )
    assert env["VKPY_NODE_IP"]["valueFrom"]["fieldRef"]["fieldPath"] == "status.podIP"
    # `aci` is the same backend
    aci = vkpy_container(template(helm, "virtual-kubelet", *ACI_INSTALL, "--set", "provider=aci"))
    assert "--provider=azure" in aci["args"]


@pytest.mark.parametrize(
    "values",
    [
        ["--set", "provider=sim", "--set", "capacity.cpu=8"],
        ["--set", "provider=process"],
        ["--set", "provider=lambda", "--set", "providers.lambda.role_arn=arn:aws:iam::1:role/x",
         "--set", "providers.lambda.region=eu-west-1"],
        ["--set", "provider=fargate", "--set", "providers.fargate.region=eu-west-1",
         "--set", "providers.fargate.cluster=vkpy",
         "--set", "providers.fargate.subnets[0]=subnet-1"],
        ACI_INSTALL,
        ["--set", "provider=aci", "--set", "providers.azure.subscriptionId=s",
         "--set", "providers.azure.resourceGroup=rg", "--set", "providers.azure.location=westus",
         "--set", "providers.azure.existingSecret=my-sp",
         "--set", "providers.azure.clientId=c", "--set", "providers.azure.tenantId=t"],
    ],
    ids=["sim", "process", "lambda", "fargate", "aci-install", "aci-existing-secret"],
)  # fmt: skip
def test_the_rendered_provider_config_is_what_the_backend_reads(
    helm: list[str], values: list[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The ConfigMap and the container's environment, given to vkpy's own backend
    factory (as `python -m vkpy` in the pod would): accepted, no unknown keys."""
    objects = template(helm, "vk", *values)
    container = vkpy_container(objects)
    args = dict(a.removeprefix("--").split("=", 1) for a in container["args"] if "=" in a)
    config = yaml.safe_load(one(objects, "ConfigMap")["data"]["provider.yaml"])
    for item in container.get("env", []):
        if "value" in item:
            monkeypatch.setenv(item["name"], item["value"])
        elif "secretKeyRef" in item.get("valueFrom", {}):
            monkeypatch.setenv(item["name"], "from-the-secret")
    context = registry.ProviderContext(
        node_name=args["node-name"], state_dir=str(tmp_path), internal_ip="10.0.0.7"
    )
    provider = registry.create(args["provider"], config, context)
    assert provider is not None


def test_the_pod_is_hardened_probed_and_configured_from_values(helm: list[str]) -> None:
    objects = template(
        helm, "vk",
        "--set", "nodeName=edge-1", "--set", "labels.team=a",
        "--set", "taints[0].key=virtual-kubelet.io/provider", "--set", "taints[0].value=sim",
        "--set", "taints[0].effect=NoSchedule", "--set", "capacity.cpu=64",
        "--set", "capacity.pods=500", "--set", "logFormat=text", "--set", "logLevel=debug",
        "--set", "replicaCount=2", "--set", "nodeSelector.pool=system",
    )  # fmt: skip
    deployment = one(objects, "Deployment", "vk-vkpy")
    pod = deployment["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert deployment["spec"]["replicas"] == 2
    assert pod["securityContext"]["runAsNonRoot"] is True
    hardened = container["securityContext"]
    assert hardened["readOnlyRootFilesystem"] is True
    assert hardened["allowPrivilegeEscalation"] is False
    assert hardened["capabilities"]["drop"] == ["ALL"]
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    args = container["args"]
    for expected in (
        "--node-name=edge-1", "--label=team=a",
        "--taint=virtual-kubelet.io/provider=sim:NoSchedule",
        "--log-format=text", "--log-level=debug", "--leader-elect", "--rotate-server-certificates",
    ):  # fmt: skip
        assert expected in args, args
    assert pod["nodeSelector"] == {"pool": "system"}
    config = yaml.safe_load(one(objects, "ConfigMap")["data"]["provider.yaml"])
    assert config["capacity"] == {"cpu": "64", "pods": "500"}
    assert one(objects, "PodDisruptionBudget")["spec"]["maxUnavailable"] == 1
    assert one(objects, "Service")["spec"]["ports"][0]["name"] == "metrics"


# --- least privilege, shown by running vkpy with the chart's ServiceAccount only -------------

RBAC_KINDS = {"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"}


def token_kubeconfig(cluster: ClusterAccess, namespace: str, account: str, path: Path) -> Path:
    """A kubeconfig holding nothing but a TokenRequest token for `account`."""
    token = cluster.run_kubectl(
        "create", "token", account, "-n", namespace, "--duration=1h"
    ).stdout.strip()
    admin = yaml.safe_load(cluster.kubeconfig.read_text())
    context = next(c for c in admin["contexts"] if c["name"] == admin["current-context"])
    server = next(c for c in admin["clusters"] if c["name"] == context["context"]["cluster"])
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": server["cluster"]}],
        "users": [{"name": account, "user": {"token": token}}],
        "contexts": [{"name": "sa", "context": {"cluster": "c", "user": account}}],
        "current-context": "sa",
    }
    path.write_text(yaml.safe_dump(config))
    return path


def apply_rbac(kube: Kube, objects: list[dict[str, Any]]) -> str:
    """Create the chart's ServiceAccounts and RBAC for real (cluster objects renamed to
    be unique to this test); returns the manifest, to delete them afterwards."""
    rbac = [o for o in objects if o["kind"] in RBAC_KINDS]
    for obj in rbac:
        if obj["kind"] in ("ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"):
            obj["metadata"]["name"] += f"-{kube.namespace}"
        if obj.get("roleRef"):
            obj["roleRef"]["name"] += f"-{kube.namespace}"
    text = "\n---\n".join(yaml.safe_dump(o) for o in rbac)
    kube.kubectl("apply", "-f", "-", input=text)  # every object names its namespace
    return text


@pytest.fixture
def chart_rbac(
    helm: list[str], kube: Kube, cluster: ClusterAccess
) -> Iterator[list[dict[str, Any]]]:
    objects = template(
        helm, kube.namespace, "--set", "servingCert.approver.enabled=true",
        "--set", f"nodeName=vk-sa-{kube.namespace[-8:]}",
    )  # fmt: skip
    text = apply_rbac(kube, objects)
    yield objects
    kube.kubectl("delete", "--ignore-not-found", "-f", "-", input=text)


def can(cluster: ClusterAccess, user: str, *what: str) -> bool:
    result = cluster.run_kubectl("auth", "can-i", *what, f"--as={user}", check=False)
    return result.stdout.strip() == "yes"


def test_vkpy_runs_with_only_the_chart_service_account(
    kube: Kube, cluster: ClusterAccess, chart_rbac: list[dict[str, Any]], tmp_path: Path
) -> None:
    ns = kube.namespace
    node = next(a for a in vkpy_container(chart_rbac)["args"] if a.startswith("--node-name="))
    node = node.split("=", 1)[1]
    sa = f"system:serviceaccount:{ns}:vk-vkpy"
    # what it does not need, it cannot do
    assert not can(cluster, sa, "list", "secrets", "-A")
    assert not can(cluster, sa, "delete", "nodes")
    assert not can(cluster, sa, "update", "pods", "-n", ns)
    assert not can(cluster, sa, "create", "pods", "-n", ns)
    assert not can(cluster, sa, "update", "certificatesigningrequests/approval")
    approver_sa = f"system:serviceaccount:{ns}:vk-vkpy-approver"
    assert not can(cluster, approver_sa, "create", "certificatesigningrequests")
    assert not can(cluster, approver_sa, "get", "secrets", "-n", ns)

    vk_config = token_kubeconfig(cluster, ns, "vk-vkpy", tmp_path / "vkpy.kubeconfig")
    ap_config = token_kubeconfig(cluster, ns, "vk-vkpy-approver", tmp_path / "approver.kubeconfig")
    # the leader Lease: this one only (beside creating it), and only in the namespace
    assert can(cluster, sa, "update", "leases/vk-vkpy", "-n", ns)
    assert not can(cluster, sa, "update", "leases/other", "-n", ns)
    assert not can(cluster, sa, "update", "leases", "-n", "kube-node-lease")
    election = [a for a in vkpy_container(chart_rbac)["args"] if a.startswith("--leader-elect")]
    assert f"--leader-elect-resource-namespace={ns}" in election
    approver_log = tmp_path / "approver.log"
    with approver_log.open("wb") as out:
        approver = subprocess.Popen(
            [sys.executable, "-m", "vkpy.tools.approver", f"--kubeconfig={ap_config}",
             f"--allowed-requester={sa}", "--interval=0.5", "--log-format=text"],
            stdout=out, stderr=out,
        )  # fmt: skip
    agent = Agent(
        cluster=cluster,
        node_name=node,
        state_dir=tmp_path / "state",
        log_path=tmp_path / "vkpy.log",
        extra_args=["--rotate-server-certificates", *election, "--leader-elect-identity=pod-a"],
        kubeconfig_env=str(vk_config),
    )
    try:
        agent.start()
        wait_for(
            "node Ready",
            lambda: any(
                c["type"] == "Ready" and c["status"] == "True"
                for c in ((kube.get("node", node, namespaced=False) or {}).get("status") or {}).get(
                    "conditions", []
                )
            ),
            timeout=90,
        )
        kube.kubectl("create", "configmap", "settings", "-n", ns, "--from-literal=mode=fast")
        kube.kubectl("create", "secret", "generic", "creds", "-n", ns, "--from-literal=pw=x")
        pod = sim_pod(
            "web",
            node,
            volumes=[
                {"name": "c", "configMap": {"name": "settings"}},
                {"name": "s", "secret": {"secretName": "creds"}},
                {"name": "t", "projected": {"sources": [{"serviceAccountToken": {"path": "t"}}]}},
            ],
            containers=[
                {
                    "name": "app",
                    "image": "example.com/app:1",
                    "volumeMounts": [
                        {"name": "c", "mountPath": "/c"},
                        {"name": "s", "mountPath": "/s"},
                        {"name": "t", "mountPath": "/t"},
                    ],
                }
            ],
        )
        kube.create(pod)
        wait_for("pod Running", lambda: kube.phase("web") == "Running", timeout=90)
        logs = wait_for(
            "kubectl logs through the API server",
            lambda: (
                (
                    r := cluster.run_kubectl("logs", "-n", ns, "web", "--tail=1", check=False)
                ).returncode
                == 0
                and r.stdout
            ),
            timeout=60,
        )
        assert logs.startswith("line ")
        leader = json.loads(kube.kubectl("get", "lease", "-n", ns, "vk-vkpy", "-o", "json"))
        assert leader["spec"]["holderIdentity"] == "pod-a"
        heartbeat = kube.kubectl("get", "lease", "-n", "kube-node-lease", node, "-o", "json")
        assert json.loads(heartbeat)["spec"]["holderIdentity"] == node
        wait_for(
            "the CSR approved by the chart's approver",
            lambda: "CSR approved" in approver_log.read_text(),
        )
        csrs = json.loads(kube.kubectl("get", "csr", "-o", "json"))["items"]
        mine = [c for c in csrs if c["spec"].get("username") == sa]
        assert mine and all(
            c["status"].get("certificate") and c["status"]["conditions"][0]["type"] == "Approved"
            for c in mine
        )
        assert "forbidden" not in agent.logs().lower(), agent.logs()[-4000:]
        assert "forbidden" not in approver_log.read_text().lower()
    finally:
        agent.stop()
        approver.terminate()
        approver.wait(timeout=30)
        cluster.run_kubectl("delete", "node", node, "--wait=false", check=False)
        print(f"--- vkpy ---\n{agent.logs()[-8000:]}")
        print(f"--- approver ---\n{approver_log.read_text()[-4000:]}")


# --- a node set shared by the Deployment's replicas, with the chart's ServiceAccounts ---------

SET_NODES = 6


def set_leases(kube: Kube, selector: str) -> dict[str, str]:
    """The set's node Leases (not the replicas' own): node name -> holder."""
    out = json.loads(
        kube.cluster.run_kubectl(
            "get", "lease", "-n", "kube-node-lease", "-l", selector, "-o", "json"
        ).stdout
    )["items"]
    return {
        lease["metadata"]["name"]: lease["spec"].get("holderIdentity") or ""
        for lease in out
        if "vkpy.io/node-set-replica" not in lease["metadata"].get("labels", {})
    }


def test_a_node_set_release_shares_its_nodes_and_uninstalls_with_only_its_accounts(
    helm: list[str], kube: Kube, cluster: ClusterAccess, tmp_path: Path
) -> None:
    ns = kube.namespace
    prefix = f"vk-set-{ns[-8:]}"
    selector = f"vkpy.io/node-set={prefix}"
    objects = template(
        helm, ns, "--set", f"nodeName={prefix}", "--set", f"nodeSet.count={SET_NODES}",
        "--set", "replicaCount=3", "--set", "nodeLeaseDuration=8",
    )  # fmt: skip
    args = vkpy_container(objects)["args"]
    assert f"--nodes={SET_NODES}" in args and "--leader-elect" in args
    assert not [a for a in args if a.startswith("--leader-elect-lease-duration")]
    set_args = [a for a in args if a.startswith(("--nodes=", "--leader-elect", "--node-lease"))]
    job = one(objects, "Job")["spec"]["template"]["spec"]["containers"][0]["args"]
    assert f"--node-selector={selector}" in job
    rbac = apply_rbac(kube, objects)
    vk_config = token_kubeconfig(cluster, ns, "vk-vkpy", tmp_path / "vkpy.kubeconfig")
    bases: list[int] = []
    for _ in range(3):  # each replica listens on every node's port
        bases.append(free_port_range(SET_NODES, tuple(b for b in bases)))
    replicas = [
        Agent(
            cluster=cluster,
            node_name=prefix,
            state_dir=tmp_path / "platform",  # the replicas share one (sim) cloud account
            log_path=tmp_path / f"r{n}.log",
            port=bases[n],
            extra_args=[*set_args, f"--leader-elect-identity=r{n}"],
            kubeconfig_env=str(vk_config),
        )
        for n in range(3)
    ]
    uninstall_log = tmp_path / "uninstall.log"
    try:
        for agent in replicas:
            agent.start()

        def split() -> list[int]:
            return sorted(Counter(set_leases(kube, selector).values()).values())

        wait_for("two nodes each", lambda: split() == [2, 2, 2], timeout=180)
        nodes = json.loads(kube.kubectl("get", "nodes", "-l", selector, "-o", "json"))["items"]
        assert len(nodes) == SET_NODES
        names = [f"p{n}" for n in range(SET_NODES)]
        for n, name in enumerate(names):
            kube.create(sim_pod(name, f"{prefix}-{n}"))
        wait_for("pods Running", lambda: all(kube.phase(n) == "Running" for n in names), 120)
        before = {n: pod_identity(kube.get("pod", n) or {}) for n in names}

        replicas[2].kill()  # its nodes go to the two others once their Leases run out
        wait_for("three nodes each", lambda: split() == [3, 3], timeout=120)
        assert set(set_leases(kube, selector).values()) == {"r0", "r1"}
        assert {n: pod_identity(kube.get("pod", n) or {}) for n in names} == before

        # `helm uninstall`'s hook, with its own account: drain the set, scale vkpy's
        # Deployment to zero (here a stand-in whose pod is held by a finalizer until
        # the replicas have stopped, as a real vkpy pod is gone only once vkpy is),
        # then delete the set's Nodes and Leases
        kube.create(stand_in_deployment())
        hook = token_kubeconfig(cluster, ns, "vk-vkpy-uninstall", tmp_path / "hook.kubeconfig")
        with uninstall_log.open("wb") as out:
            uninstall = subprocess.Popen(
                [sys.executable, "-m", "vkpy.tools.uninstall", *job, "--interval=0.5",
                 "--log-format=text"],
                stdout=out, stderr=out, env={**os.environ, "KUBECONFIG": str(hook)},
            )  # fmt: skip
        wait_for(
            "the Deployment scaled to zero",
            lambda: (kube.get("deploy", "vk-vkpy") or {})["spec"]["replicas"] == 0,
            timeout=120,
        )
        assert not [p for p in names if kube.get("pod", p)]  # drained before vkpy stops
        for agent in replicas[:2]:
            agent.stop()
            assert agent.process is not None
            agent.process.wait(timeout=60)
        for pod in kube.list("pod", "app.kubernetes.io/name=vkpy"):
            kube.kubectl(
                "patch", "pod", "-n", ns, pod["metadata"]["name"], "--type=merge",
                "-p", '{"metadata":{"finalizers":null}}',
            )  # fmt: skip
        assert uninstall.wait(timeout=120) == 0, uninstall_log.read_text()[-4000:]
        assert kube.kubectl("get", "nodes", "-l", selector, "-o", "name") == ""
        assert set_leases(kube, selector) == {}
        left = cluster.run_kubectl("get", "lease", "-n", "kube-node-lease", "-l", selector)
        assert "No resources found" in left.stderr
        for log in [*(a.log_path for a in replicas), uninstall_log]:
            assert "forbidden" not in log.read_text().lower(), log.read_text()[-4000:]
    finally:
        for agent in replicas:
            agent.stop()
        kube.kubectl("delete", "--ignore-not-found", "--wait=false", "-f", "-", input=rbac)
        cluster.run_kubectl("delete", "nodes", "-l", selector, "--wait=false", check=False)
        cluster.run_kubectl("delete", "lease", "-n", "kube-node-lease", "-l", selector, check=False)
        for agent in replicas:
            print(f"--- {agent.log_path.stem} ---\n{agent.logs()[-3000:]}")
        if uninstall_log.exists():
            print(f"--- uninstall ---\n{uninstall_log.read_text()[-3000:]}")


def stand_in_deployment() -> dict[str, Any]:
    """A Deployment named and labelled as the chart's, whose one pod never runs
    (nothing matches its node selector) and is held by a finalizer once deleted."""
    labels = {"app.kubernetes.io/name": "vkpy", "app.kubernetes.io/instance": "vk"}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "vk-vkpy", "labels": labels},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels, "finalizers": ["vkpy.test/replicas-stopped"]},
                "spec": {
                    "nodeSelector": {"vkpy.test/no-such-node": "true"},
                    "containers": [{"name": "vkpy", "image": "vkpy:test"}],
                },
            },
        },
    }
