"""`network: pod`: a network namespace and an address of its own for every pod.

Everything runs in a network namespace this test makes (vkpy.devcluster.netns: the
node address 198.18.0.1 on a veth pair, as for the conformance run): the control
plane, the vkpy node with the pod CIDR 10.244.7.0/24, kubectl, and the test's own
connections. Nothing reaches or changes the host's interfaces. Two pods listen on
port 8080 at once, each answers at its own status.podIP from the node's namespace
and through `kubectl port-forward`, readiness (HTTP), startup and liveness (TCP)
probes reach each at its address, 127.0.0.1 in a pod is the pod's own (a
loopback-only service of the node is out of reach), a hostNetwork pod stays on the
node's network, a restarted vkpy keeps the addresses, takes new ones from the Node's
podCIDR and removes pairs of pods that are gone (its own only), and deleting the
pods leaves no veth, address, route or network namespace behind. A pod CIDR over
the node's own addresses is refused at start.
"""

from __future__ import annotations

import ipaddress
import json
import socket
import socketserver
import subprocess
import threading
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.agent import Agent, Kube, free_port, wait_for
from tests.integration.process_fixtures import FAST, kill_containers, phase_is, process_pod
from tests.namespaces import wait_for_default_service_account
from vkpy.devcluster import ClusterAccess, DevCluster
from vkpy.devcluster.netns import NODE_IP, PrivateNetwork
from vkpy.providers.process.podnet import link_name

POD_CIDR = "10.244.7.0/24"
UID_RANGE = "310000-310999"
NODE_CIDR = "10.244.9.0/24"
SERVER = """
import http.server, os, socket
body = " ".join([os.environ["POD_NAME"], os.environ["POD_IP"], socket.gethostname()]).encode()
class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *args):
        pass
http.server.HTTPServer(("0.0.0.0", 8080), Handler).serve_forever()
"""
CONNECT = """
import socket, sys
s = socket.socket()
s.settimeout(5)
code = s.connect_ex(("127.0.0.1", int(sys.argv[1])))
print("connected" if code == 0 else f"refused {code}")
if code == 0:
    s.sendall(b"GET / HTTP/1.0\\r\\n\\r\\n")
    data = b""
    while chunk := s.recv(4096):
        data += chunk
    print(data.decode().splitlines()[-1])
"""

LOW_PORT_AND_PING = """
import os, socket
s = socket.socket()
s.bind(("0.0.0.0", 80))
p = socket.socket(socket.AF_INET, socket.SOCK_DGRAM, socket.IPPROTO_ICMP)
print("uid>0" if os.getuid() > 0 else "root", "bound", s.getsockname()[1], "ping")
"""


class _Secret(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        self.request.sendall(b"node-only secret\n")


@pytest.fixture
def node_network() -> Iterator[PrivateNetwork]:
    with PrivateNetwork() as network:
        yield network


@pytest.fixture
def netns_cluster(node_network: PrivateNetwork, tmp_path: Path) -> Iterator[ClusterAccess]:
    dev = DevCluster(tmp_path / "cluster")
    dev.up()
    try:
        yield dev.access()
    finally:
        dev.down()


def server_pod(name: str, node: str) -> dict[str, Any]:
    env = [
        {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
    ]
    pod = process_pod(
        name,
        node,
        "",
        container={
            "command": ["python3", "-c", SERVER],
            "env": env,
            "ports": [{"containerPort": 8080}],
            "readinessProbe": {"httpGet": {"port": 8080}, "periodSeconds": 1},
            # Fails the pod (restartPolicy Never) unless they reach it, once it listens.
            "startupProbe": {
                "tcpSocket": {"port": 8080},
                "periodSeconds": 1,
                "failureThreshold": 120,
            },
            "livenessProbe": {"tcpSocket": {"port": 8080}, "periodSeconds": 1},
        },
    )
    return pod


def ready_ip(kube: Kube, name: str) -> str | None:
    pod = kube.get("pod", name) or {}
    status = pod.get("status") or {}
    conditions = {c["type"]: c["status"] for c in status.get("conditions") or []}
    if status.get("phase") == "Running" and conditions.get("Ready") == "True":
        return str(status.get("podIP"))
    return None


def http_get(host: str, port: int) -> str:
    with urllib.request.urlopen(f"http://{host}:{port}/", timeout=10) as response:
        return str(response.read().decode())


def run_ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True)


def run_ip_out(*args: str) -> str:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=True).stdout


def veths_and_addresses() -> tuple[list[str], list[str], str]:
    links = json.loads(
        subprocess.run(
            ["ip", "-j", "link", "show", "type", "veth"], capture_output=True, check=True
        ).stdout
    )
    addresses = json.loads(
        subprocess.run(["ip", "-j", "-4", "addr"], capture_output=True, check=True).stdout
    )
    routes = subprocess.run(["ip", "route"], capture_output=True, text=True, check=True).stdout
    return (
        sorted(str(link["ifname"]) for link in links),
        sorted(str(a["local"]) for link in addresses for a in link.get("addr_info") or []),
        routes,
    )


def port_forward_get(access: ClusterAccess, pod: str) -> str:
    local = free_port()
    client = subprocess.Popen(
        [str(access.kubectl), f"--kubeconfig={access.kubeconfig}", "port-forward",
         f"pod/{pod}", f"{local}:8080", "--address=127.0.0.1"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        assert client.stdout is not None
        line = client.stdout.readline().decode()
        assert line.startswith("Forwarding from 127.0.0.1:"), line
        return http_get("127.0.0.1", local)
    finally:
        client.terminate()
        client.wait(timeout=10)


def test_pods_have_their_own_network(
    netns_cluster: ClusterAccess, node_network: PrivateNetwork, tmp_path: Path
) -> None:
    access = netns_cluster
    kube = Kube(access, "default")
    wait_for_default_service_account(access.run_kubectl, "default")
    secret = socketserver.TCPServer(("127.0.0.1", 0), _Secret)
    threading.Thread(target=secret.serve_forever, daemon=True).start()
    secret_port = secret.server_address[1]
    state = tmp_path / "node"
    state.mkdir()
    config = state / "provider.json"
    # Ids of their own: other vkpy nodes of this host (other tests) take the default
    # range's first ids, and end whatever runs as them when their pods go.
    settings = {
        **FAST,
        "network": "pod",
        "pod_cidr": POD_CIDR,
        "pod_uid_range": UID_RANGE,
        "allow": ["hostNetwork"],  # refused by default (privileges.py)
    }
    config.write_text(json.dumps(settings))
    agent = Agent(
        cluster=access,
        node_name="vk-podnet",
        state_dir=state / "state",
        log_path=tmp_path / "vkpy.log",
        provider="process",
        provider_config=config,
        extra_args=[f"--node-ip={NODE_IP}", "--listen-address=0.0.0.0"],
    )
    pods = agent.state_dir / "process" / "pods"
    # A pod CIDR over the node's own addresses would take its network over: refused.
    wrong = state / "wrong.json"
    wrong.write_text(json.dumps({**settings, "pod_cidr": "198.18.0.0/24"}))
    refused_node = Agent(
        cluster=access,
        node_name="vk-wrong",
        state_dir=state / "wrong",
        log_path=tmp_path / "wrong.log",
        provider="process",
        provider_config=wrong,
        extra_args=[f"--node-ip={NODE_IP}"],
    ).start()
    assert refused_node.process is not None
    assert refused_node.process.wait(timeout=120) != 0
    assert "covers the node's own addresses 198.18.0.1/32" in refused_node.logs()
    agent.start()
    try:
        wait_for("the node", lambda: kube.get("node", "vk-podnet", namespaced=False), 60)
        node = kube.get("node", "vk-podnet", namespaced=False) or {}
        assert node["metadata"]["labels"]["vkpy.io/network"] == "pod"
        for name in ("a", "b"):
            kube.apply(server_pod(name, "vk-podnet"))
        kube.apply(process_pod("h", "vk-podnet", "exec sleep 600", hostNetwork=True))
        # Both listen on 8080 and become Ready: the readiness probe reached each.
        ips = {name: wait_for(f"{name} Ready", lambda n=name: ready_ip(kube, n), 90)
               for name in ("a", "b")}  # fmt: skip
        assert ips["a"] != ips["b"]
        for ip in ips.values():
            assert ipaddress.IPv4Address(ip) in ipaddress.IPv4Network(POD_CIDR)
            assert ip != "10.244.7.1"  # the node's end
        for name, ip in ips.items():
            # From the node's namespace, at the pod's own address; the pod sees its
            # own address in status.podIP (downward API) and its own hostname.
            assert http_get(ip, 8080) == f"{name} {ip} {name}"
            assert port_forward_get(access, name) == f"{name} {ip} {name}"
        # 127.0.0.1 in a pod is the pod's: the node's loopback-only service is out of
        # reach, the pod's own server is there.
        with socket.create_connection(("127.0.0.1", secret_port), timeout=5) as mine:
            assert mine.recv(100) == b"node-only secret\n"
        refused = kube.kubectl(
            "exec", "a", "--", "python3", "-c", CONNECT, str(secret_port), check=False
        )
        assert refused.startswith("refused"), refused
        own = kube.kubectl("exec", "b", "--", "python3", "-c", CONNECT, "8080")
        assert own.split("\n")[:2] == ["connected", f"b {ips['b']} b"], own
        # The pod's /etc/hosts (its mount namespace) names it at its own address.
        hosts = kube.kubectl("exec", "a", "--", "cat", "/etc/hosts")
        assert f"{ips['a']}\ta\n" in hosts, hosts
        # As a container runtime sets a pod's network up, the pod's unprivileged user
        # may listen below port 1024 (nginx on 80) and open ping sockets.
        low = kube.kubectl("exec", "a", "--", "python3", "-c", LOW_PORT_AND_PING)
        assert low == "uid>0 bound 80 ping\n", low

        # While vkpy is down: the Node gets a podCIDR (as an admin or the
        # controller-manager would set it), pod b is deleted for good, and pairs are
        # left behind: one of this node's for a pod that is gone, one of another node's.
        uid_b = (kube.get("pod", "b") or {})["metadata"]["uid"]
        agent.stop()
        kube.kubectl(
            "patch", "node", "vk-podnet", "-p", json.dumps({"spec": {"podCIDR": NODE_CIDR}})
        )
        kube.kubectl("delete", "pod", "b", "--grace-period=0", "--force")
        for link, owner in (("vkpstale", "vkpy:vk-podnet:gone"), ("vkpother", "vkpy:vk-x:y")):
            run_ip("link", "add", link, "type", "veth", "peer", "name", f"{link}1")
            run_ip("link", "set", link, "alias", owner)
        # A restarted vkpy keeps the addresses, takes new ones from the Node's podCIDR,
        # removes what it left of b and its own stale pair, and no other node's.
        agent.start()
        kube.apply(server_pod("c", "vk-podnet"))
        ip_c = wait_for("c Ready", lambda: ready_ip(kube, "c"), 90)
        assert ipaddress.IPv4Address(ip_c) in ipaddress.IPv4Network(NODE_CIDR)
        assert ready_ip(kube, "a") == ips["a"]
        assert http_get(ips["a"], 8080).startswith("a ")
        assert http_get(ip_c, 8080).startswith("c ")
        uids = [(kube.get("pod", n) or {})["metadata"]["uid"] for n in ("a", "c")]
        mine = {link_name(uid) for uid in uids}
        others = {"vkpy0", "vkpy1", "vkpother", "vkpother1"}
        wait_for("b's pair removed", lambda: set(veths_and_addresses()[0]) == mine | others)
        assert {"10.244.7.1", "10.244.9.1"} <= set(veths_and_addresses()[1])  # node ends
        assert link_name(uid_b) not in veths_and_addresses()[0]

        # A hostNetwork pod stays on the node's network: the node's address, no pair.
        host_pod = wait_for("h Running", lambda: phase_is(kube, "h", "Running"))
        assert host_pod["status"]["podIP"] == NODE_IP
        assert link_name(host_pod["metadata"]["uid"]) not in veths_and_addresses()[0]

        kube.kubectl("delete", "pod", "a", "c", "h", "--timeout=90s")
        links, addresses, routes = veths_and_addresses()
        assert set(links) == others
        assert not [a for a in addresses if a.startswith("10.244.")], addresses
        assert "10.244." not in routes, routes
        # And the pods' namespaces are gone, not merely unplugged: the node's namespace
        # knows no peer namespace any more.
        wait_for("no pod namespace left", lambda: not run_ip_out("netns", "list-id").strip())
    finally:
        secret.shutdown()
        agent.stop()
        kill_containers(pods)
        print(f"--- log of vk-podnet ---\n{agent.logs()[-20000:]}")
