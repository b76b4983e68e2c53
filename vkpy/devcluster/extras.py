"""Starting and stopping what runs on top of the control plane: metrics-server, the
image registry, nodes.

`DevCluster` delegates here so that cluster.py stays about the four control-plane
components. Everything started here is recorded in addons.json (addons.py) and
stopped by `down` before the control plane, while the API server can still delete
the nodes' pods (that is how the process backend's containers are stopped), then
the processes themselves, then whatever container a node left behind.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from . import images, metrics_server, nodes, pod_network, processes, registry
from .access import ClusterAccess
from .addons import Addon, Addons
from .binaries import tool_dir
from .components import LOOPBACK, Layout
from .kubeconfig import write_kubeconfig
from .nodes import NodeSpec
from .processes import ProcessRecord
from .state import free_ports

log = logging.getLogger("vkpy.devcluster")


class ExtrasFailed(RuntimeError):
    """An add-on did not come up; the message carries the tail of its log."""


def _ready(node: Mapping[str, object]) -> bool:
    status = node.get("status")
    conditions = status.get("conditions", []) if isinstance(status, dict) else []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


class Extras:
    """The add-ons of one dev cluster directory."""

    def __init__(self, layout: Layout, access: ClusterAccess, env: Mapping[str, str]) -> None:
        self.layout = layout
        self.access = access
        self.env = dict(env)
        self.records = Addons.load(layout.dir / "addons.json")

    # -- metrics-server ---------------------------------------------------------------

    def start_metrics_server(self, timeout: float = 120.0) -> None:
        """Start metrics-server (building it the first time) unless it runs; register
        v1beta1.metrics.k8s.io and wait until the API server reports it Available."""
        name = "metrics-server"
        running = self.records.named(name)
        directory = self.layout.dir / name
        if running is None or not processes.is_running(running.process):
            binary = tool_dir(name) / name
            pki = self.layout.pki
            metrics_server.write_pki(directory, pki)
            kubeconfig = directory / "kubeconfig"
            server = self.access.server
            client = metrics_server.client_cert(directory)
            write_kubeconfig(kubeconfig, server, pki.ca.cert, client, metrics_server.USER)
            (port,) = free_ports(1)
            # Its RBAC first: it reads the front-proxy CA from kube-system at start.
            self._register_metrics_api(port)
            argv = metrics_server.args(binary, directory, kubeconfig, port, pki)
            record = processes.spawn(name, argv, self.layout.log(name), env=self.env)
            running = Addon(name, record, port=port)
            self.records.add(running)
        else:
            self._register_metrics_api(running.port)
        self._wait(
            [running.process],
            "the metrics API to be Available",
            lambda: metrics_server.available(self._get("apiservice", metrics_server.API_SERVICE)),
            timeout,
        )

    def _register_metrics_api(self, port: int) -> None:
        manifests = metrics_server.manifest_list(port, self.layout.pki.ca.cert)
        self.access.run_kubectl("apply", "-f", "-", input=manifests)

    # -- the image registry -----------------------------------------------------------

    def start_registry(self, selected: Sequence[str] | None = None) -> list[images.Built]:
        """Run the registry (registry.py) unless it runs, build the images (all, or
        `selected`; cached ones are reused) and push those it does not have yet; write
        `<dir>/registry/registries.conf`. Returns what was built or found."""
        name = "registry"
        directory = self.layout.dir / name
        running = self.records.named(name)
        if running is None or not processes.is_running(running.process):
            directory.mkdir(parents=True, exist_ok=True)
            (port,) = free_ports(1, [running.port] if running else [])
            config = directory / "config.yml"
            config.write_text(registry.config_text(directory, f"{LOOPBACK}:{port}"))
            argv = registry.argv(config)
            record = processes.spawn(name, argv, self.layout.log(name), env=self.env)
            running = Addon(name, record, port=port)
            self.records.add(running)

            def alive(record: ProcessRecord = record) -> bool:
                processes.exit_code(record.pid)
                return processes.is_running(record)

            registry.wait_until_answering(f"{LOOPBACK}:{running.port}", alive)
        host = f"{LOOPBACK}:{running.port}"
        built = images.build(selected)
        for image in built:
            pushed = registry.push(host, image)
            if pushed:
                log.info("pushed %s to %s", ", ".join(pushed), host)
        setting = registry.mirrors_setting(host)
        (directory / "registries.conf").write_text(registry.registries_conf(setting))
        return built

    def registry_host(self) -> str | None:
        """`127.0.0.1:PORT` of the running registry, or None."""
        running = self.records.named("registry")
        if running is None or not processes.is_running(running.process):
            return None
        return f"{LOOPBACK}:{running.port}"

    def registries_setting(self) -> dict[str, object] | None:
        """The nodes' `registries:` setting for the running registry, or None."""
        host = self.registry_host()
        return None if host is None else registry.mirrors_setting(host)

    # -- the API server for pods with a network of their own ---------------------------

    def start_api_relay(self, timeout: float = 30.0) -> None:
        """Unless it runs: relay pod_network.API_ADDRESS, on the API server's port, to
        the API server on loopback (pod_network.py, service_ip.py)."""
        name = "api-relay"
        running = self.records.named(name)
        if running is not None and processes.is_running(running.process):
            return
        port = int(self.access.server.rsplit(":", 1)[1].rstrip("/"))
        argv = [sys.executable, "-m", "vkpy.devcluster.service_ip",
                pod_network.API_ADDRESS, str(port), str(port)]  # fmt: skip
        record = processes.spawn(name, argv, self.layout.log(name), env=self.env)
        self.records.add(Addon(name, record, port=port))
        self._wait(
            [record],
            f"the API server relay on {pod_network.API_ADDRESS}:{port}",
            lambda: _answers(pod_network.API_ADDRESS, port),
            timeout,
        )

    # -- nodes ------------------------------------------------------------------------

    def node_dir(self, name: str) -> Path:
        return self.layout.dir / "nodes" / name

    def start_nodes(self, specs: Sequence[NodeSpec], timeout: float = 90.0) -> list[str]:
        """Start each node that is not already running; wait until all are Ready."""
        started: list[ProcessRecord] = []
        for spec in specs:
            existing = self.records.named(spec.name)
            if existing is not None and processes.is_running(existing.process):
                continue
            directory = self.node_dir(spec.name)
            cidr = None
            if nodes.pod_networked(spec):
                self.start_api_relay()
                cidr = pod_network.claim(self.layout.dir, spec.name, _node_running)
            nodes.prepare(
                spec,
                directory,
                self.layout.pki,
                self.access.server,
                self.registries_setting(),
                cidr,
            )
            (port,) = free_ports(1)
            argv = spec.argv(directory, self.layout.kubeconfig, port)
            record = processes.spawn(spec.name, argv, self.layout.log(spec.name), env=self.env)
            self.records.add(Addon("node", record, state_dir=directory / "state", port=port))
            started.append(record)
        names = [s.name for s in specs]
        what = f"nodes {', '.join(names)} to be Ready"
        self._wait(started, what, lambda: self._all_ready(names), timeout)
        return [r.name for r in started]

    def _all_ready(self, names: Sequence[str]) -> bool:
        return all(_ready(self._get("node", n)) for n in names)

    def stop_nodes(self, names: set[str] | None = None, grace: float = 5.0) -> list[str]:
        """Delete the nodes' pods through the API, stop the nodes, kill what is left,
        and delete their Node objects. Returns the names of the nodes stopped."""
        chosen = [
            a for a in self.records.of_kind("node") if names is None or a.process.name in names
        ]
        if not chosen:
            return []
        for addon in chosen:
            if processes.is_running(addon.process):
                self._delete_pods(addon.process.name)
        left = processes.stop([a.process for a in chosen], grace)
        for addon in chosen:
            if addon.state_dir is not None:
                killed = nodes.kill_leftover_pods(addon.state_dir)
                if killed:
                    log.warning("killed %d containers %s left", killed, addon.process.name)
            node = addon.process.name
            self.access.run_kubectl(
                "delete", "node", node, "--ignore-not-found", "--wait=false", check=False
            )
        if left:
            raise ExtrasFailed(f"could not stop {', '.join(r.name for r in left)}")
        stopped = {a.process.name for a in chosen}
        self.records.remove(stopped)
        for name in stopped:
            pod_network.release(self.layout.dir, name)
        return sorted(stopped)

    def _delete_pods(self, node: str) -> None:
        """Delete every pod bound to `node` and wait (bounded) until they are gone."""
        selector = f"spec.nodeName={node}"
        self.access.run_kubectl(
            "delete", "pods", "--all-namespaces", f"--field-selector={selector}",
            "--grace-period=2", "--wait=true", "--timeout=30s", timeout=45.0, check=False,
        )  # fmt: skip

    # -- everything -------------------------------------------------------------------

    def stop_all(self, api_up: bool, grace: float = 5.0) -> list[str]:
        """Stop every add-on (nodes first). With `api_up` False only processes are
        stopped and leftover containers killed (the API cannot be asked)."""
        stopped: list[str] = []
        if api_up:
            stopped += self.stop_nodes(grace=grace)
            api_service = metrics_server.API_SERVICE
            self.access.run_kubectl(
                "delete", "apiservice", api_service, "--ignore-not-found", check=False
            )
        records = [a.process for a in self.records.items]
        left = processes.stop(records, grace)
        # Every node's state dir, including `run`'s node, which is not an add-on.
        for state_dir in sorted((self.layout.dir / "nodes").glob("*/state")):
            nodes.kill_leftover_pods(state_dir)
            nodes.remove_oci_pods_dir(state_dir)
        stopped += [r.name for r in records if r not in left]
        for addon in self.records.of_kind("node"):
            if addon.process not in left:
                pod_network.release(self.layout.dir, addon.process.name)
        self.records.remove({r.name for r in records if r not in left})
        if left:
            raise ExtrasFailed(f"could not stop {', '.join(r.name for r in left)}")
        return stopped

    def running(self) -> list[str]:
        return [a.process.name for a in self.records.items if processes.is_running(a.process)]

    # -- helpers ----------------------------------------------------------------------

    def _get(self, kind: str, name: str) -> dict[str, object]:
        got = self.access.run_kubectl("get", kind, name, "-o", "json", check=False)
        if got.returncode != 0:
            return {}
        loaded: dict[str, object] = json.loads(got.stdout)
        return loaded

    def _wait(
        self,
        started: Sequence[ProcessRecord],
        what: str,
        done: Callable[[], bool],
        timeout: float,
    ) -> None:
        deadline = time.monotonic() + timeout
        while not done():
            for record in started:
                processes.exit_code(record.pid)
                if not processes.is_running(record):
                    raise ExtrasFailed(
                        f"{record.name} exited while waiting for {what}. Last lines of "
                        f"{record.log}:\n{processes.tail(record.log)}"
                    )
            if time.monotonic() > deadline:
                tails = "\n".join(f"--- {r.log}:\n{processes.tail(r.log)}" for r in started)
                raise ExtrasFailed(f"timed out after {timeout:g} s waiting for {what}\n{tails}")
            time.sleep(0.5)


def _answers(address: str, port: int) -> bool:
    try:
        with socket.create_connection((address, port), timeout=1):
            return True
    except OSError:
        return False


def _node_running(cluster_dir: Path, node: str) -> bool:
    """Whether the dev cluster in `cluster_dir` runs node `node` (a pod CIDR claim's
    holder, pod_network.py)."""
    try:
        addon = Addons.load(cluster_dir / "addons.json").named(node)
    except (OSError, ValueError, KeyError, TypeError):
        return False
    return addon is not None and processes.is_running(addon.process)


def child_env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("KUBECONFIG", None)
    return env
