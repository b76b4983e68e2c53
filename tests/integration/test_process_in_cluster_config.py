"""A pod with a network of its own reaches the API server with the in-cluster
configuration (issue 18, kubectl's "should handle in-cluster config" spec).

Inside a network namespace of the test's own (netns.py), as in the conformance run:
the `kubernetes` Service's ClusterIP 10.0.0.1:443 is relayed to the API server
(service_ip.py), and vkpy gives its pods that address as `KUBERNETES_SERVICE_HOST`.
A pod then lists pods with its ServiceAccount token, verifying the API server's
certificate with the ServiceAccount's CA, both at `$KUBERNETES_SERVICE_HOST:
$KUBERNETES_SERVICE_PORT` and at `https://kubernetes.default.svc` (its /etc/hosts
names the Service: no cluster DNS here). Before, the pods were given 127.0.0.1 and
the API server's port, which in a pod's own network is the pod itself, the
certificate did not name the Service's address, and `kubernetes.default.svc` did
not resolve.
"""

# ruff: noqa: F811 - pytest fixtures are imported by name and then requested as arguments
from __future__ import annotations

import json
from pathlib import Path

from tests.integration.agent import Agent, Kube, wait_for
from tests.integration.process_fixtures import FAST, kill_containers, phase_is, process_pod
from tests.integration.test_process_pod_network import (  # noqa: F401 - fixtures
    netns_cluster,
    node_network,
)
from tests.namespaces import wait_for_default_service_account
from vkpy.devcluster import ClusterAccess
from vkpy.devcluster.netns import NODE_IP, PrivateNetwork
from vkpy.devcluster.service_ip import ServiceRelay

LIST_PODS = """
import json, os, ssl, urllib.request
sa = "/var/run/secrets/kubernetes.io/serviceaccount"
token = open(sa + "/token").read()
ns = open(sa + "/namespace").read()
tls = ssl.create_default_context(cafile=sa + "/ca.crt")
env = os.environ
for base in ("https://%s:%s" % (env["KUBERNETES_SERVICE_HOST"], env["KUBERNETES_SERVICE_PORT"]),
             "https://kubernetes.default.svc"):
    ask = urllib.request.Request(base + "/api/v1/namespaces/%s/pods" % ns,
                                 headers={"Authorization": "Bearer " + token})
    with urllib.request.urlopen(ask, context=tls, timeout=20) as answer:
        names = sorted(p["metadata"]["name"] for p in json.load(answer)["items"])
        print(base, answer.status, " ".join(names))
"""


def test_a_pod_reaches_the_api_server_with_in_cluster_config(
    netns_cluster: ClusterAccess, node_network: PrivateNetwork, tmp_path: Path
) -> None:
    access = netns_cluster
    kube = Kube(access, "default")
    wait_for_default_service_account(access.run_kubectl, "default")
    access.run_kubectl(
        "create", "rolebinding", "sa-view", "--clusterrole=view",
        "--serviceaccount=default:default",
    )  # fmt: skip
    server = access.run_kubectl("config", "view", "--minify", "-o", "json").stdout
    api_port = int(json.loads(server)["clusters"][0]["cluster"]["server"].rsplit(":", 1)[1])
    with ServiceRelay(api_port) as relay:
        config = tmp_path / "provider.json"
        config.write_text(
            json.dumps(
                {
                    **FAST,
                    "network": "pod",
                    "pod_cidr": "10.244.8.0/24",
                    "pod_uid_range": "311000-311999",
                    "kubernetes_service_host": relay.address,
                    "kubernetes_service_port": relay.port,
                }
            )
        )
        agent = Agent(
            cluster=access,
            node_name="vk-incluster",
            state_dir=tmp_path / "state",
            log_path=tmp_path / "vkpy.log",
            provider="process",
            provider_config=config,
            extra_args=[f"--node-ip={NODE_IP}", "--listen-address=0.0.0.0"],
        )
        agent.start()
        try:
            pod = process_pod("incluster", "vk-incluster", "")
            pod["spec"]["containers"][0]["command"] = ["python3", "-c", LIST_PODS]
            kube.apply(pod)
            done = wait_for(
                "the pod's end",
                lambda: (
                    phase_is(kube, "incluster", "Succeeded")
                    or phase_is(kube, "incluster", "Failed")
                ),
                timeout=180,
            )
            output = kube.kubectl("logs", "incluster")
            assert done["status"]["phase"] == "Succeeded", output
            assert output.splitlines() == [
                "https://10.0.0.1:443 200 incluster",
                "https://kubernetes.default.svc 200 incluster",
            ], output
        finally:
            kube.kubectl("delete", "pod", "incluster", "--wait=false", check=False)
            agent.stop()
            kill_containers(agent.state_dir / "process" / "pods")
