"""The dev cluster's pod network: each worker's pod CIDR, and where its pods find the API server.

The dev cluster's workers run `network: pod` (a network namespace per pod, an address
from the node's pod CIDR on a veth to the host: vkpy/providers/process/podnet.py).
Two things follow, both kept here:

- **Pod CIDRs unique on the host.** A pod's address is routed on the host by a /32
  route to its veth, so two nodes anywhere on the host (several dev clusters run side
  by side in tests) must never hand out the same address. Workers take /24s of
  CLUSTER_CIDR (10.244.0.0/16, the pod network kind and flannel default to), claimed
  host-wide: a claim is a file in CLAIMS (tmpfs, gone on reboot) made with O_EXCL,
  naming the cluster directory and the node; a restarted worker gets its own /24
  again (its pods keep their addresses), `stop_nodes` releases it, and a claim whose
  cluster is gone or whose node has not run for CLAIM_GRACE seconds is taken over.
  A /24 the host already routes or has an address in (a real network, or another
  program's pods) is skipped.
- **The API server, reachable from the pods.** The API server listens on 127.0.0.1,
  which in a pod's own network namespace is the pod itself. API_ADDRESS (10.244.0.1,
  the first address of the pod network, in no worker's /24) is put on the host's
  loopback device, and a relay (service_ip.py, run as the add-on `api-relay`) listens
  there on the API server's own port and forwards to it, as kube-proxy forwards the
  `kubernetes` Service. A pod's packets to it leave by its default route (the host
  end of its veth) and are delivered locally; the API server's serving certificate
  names the address (cluster_pki.py), so in-cluster clients verify it as usual. The
  workers give their pods KUBERNETES_SERVICE_HOST/PORT = API_ADDRESS and that port.

What is exposed: only the relay listens on a non-loopback address, API_ADDRESS, on
the API server's port. Other machines could reach it only by routing 10.244.0.1 to
this host themselves (the host answers ARP for its local addresses); behind it is
the API server, which authenticates every request as on loopback. Nothing else of the
dev cluster listens beyond 127.0.0.1.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from .cluster_pki import POD_NETWORK_API_IP

CLUSTER_CIDR = "10.244.0.0/16"
API_ADDRESS = POD_NETWORK_API_IP
#: Where the host-wide claims of worker /24s live (tmpfs: a reboot forgets them).
CLAIMS = Path("/run/vkpy-devcluster/pod-cidrs")
#: Seconds a claim is kept for a node that is not running (between claim and start).
CLAIM_GRACE = 300.0


class PodNetworkError(RuntimeError):
    """No pod CIDR could be given to a worker; the message says why."""


def slot_cidr(slot: int) -> str:
    """The `slot`-th /24 of CLUSTER_CIDR (1-254; 0 holds API_ADDRESS)."""
    if not 0 < slot < 255:
        raise ValueError(f"pod CIDR slot {slot} is outside 1-254")
    network = ipaddress.IPv4Network(CLUSTER_CIDR)
    return str(ipaddress.IPv4Network((int(network.network_address) + (slot << 8), 24)))


def host_networks() -> list[ipaddress.IPv4Network]:
    """The IPv4 destinations the host routes and the networks of its addresses."""
    found: list[ipaddress.IPv4Network] = []
    for args in (["-4", "route", "show", "table", "all"], ["-4", "addr"]):
        result = subprocess.run(
            ["ip", "-j", *args], capture_output=True, text=True, timeout=30, check=False
        )
        try:
            items = json.loads(result.stdout or "[]")
        except ValueError:
            continue
        for item in items if isinstance(items, list) else []:
            texts = [str(item.get("dst", ""))]
            for info in item.get("addr_info") or []:
                texts.append(f"{info.get('local')}/{info.get('prefixlen')}")
            for text in texts:
                with contextlib.suppress(ValueError):
                    if text and text != "default":
                        found.append(ipaddress.IPv4Network(text, strict=False))
    return found


def _in_use(cidr: str, networks: list[ipaddress.IPv4Network]) -> bool:
    """Whether the host already routes or has an address anywhere in `cidr` (a
    default route does not count)."""
    wanted = ipaddress.IPv4Network(cidr)
    return any(n.prefixlen > 0 and n.overlaps(wanted) for n in networks)


def _read(path: Path) -> dict[str, object]:
    try:
        loaded = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return loaded if isinstance(loaded, dict) else {}


def claim(
    cluster_dir: Path,
    node: str,
    running: Callable[[Path, str], bool],
    claims: Path = CLAIMS,
    networks: Callable[[], list[ipaddress.IPv4Network]] = host_networks,
) -> str:
    """The pod CIDR of worker `node` of the cluster in `cluster_dir`: the one it
    already holds, or a free /24 claimed now. `running(cluster_dir, node)` says
    whether a claim's holder still runs."""
    claims.mkdir(parents=True, exist_ok=True)
    owner = {"cluster": str(cluster_dir), "node": node}
    for path in sorted(claims.iterdir()):
        if {k: _read(path).get(k) for k in owner} == owner:
            os.utime(path)
            return path.name.replace("-", "/")
    seen = networks()
    for slot in range(1, 255):
        cidr = slot_cidr(slot)
        path = claims / cidr.replace("/", "-")
        if path.exists() and _stale(path, running):
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
        if path.exists() or _in_use(cidr, seen):
            continue
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            continue  # another cluster was quicker
        with os.fdopen(fd, "w") as handle:
            json.dump(owner, handle)
        return cidr
    raise PodNetworkError(f"every /24 of {CLUSTER_CIDR} is claimed in {claims} or in use")


def _stale(path: Path, running: Callable[[Path, str], bool]) -> bool:
    held = _read(path)
    cluster = Path(str(held.get("cluster") or ""))
    if not held or not cluster.is_dir():
        return True
    if running(cluster, str(held.get("node") or "")):
        return False
    try:
        age = time.time() - path.stat().st_mtime
    except FileNotFoundError:
        return True
    return age > CLAIM_GRACE


def release(cluster_dir: Path, node: str, claims: Path = CLAIMS) -> None:
    """Give up the pod CIDR of `node` (its pods are gone)."""
    if not claims.is_dir():
        return
    owner = {"cluster": str(cluster_dir), "node": node}
    for path in claims.iterdir():
        if {k: _read(path).get(k) for k in owner} == owner:
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
