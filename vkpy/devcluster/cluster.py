"""The local development control plane: etcd, API server, controller-manager, scheduler.

vkpy is tested against the real Kubernetes control plane, not a fake. `DevCluster`
starts the pinned release's binaries as detached processes in one directory (PKI,
etcd data, logs, kubeconfigs, state.json), waits until the cluster can take a pod,
and stops exactly what it started. Starting is synchronous on purpose: it is called
from a command line and from session-scoped test fixtures, and it only waits on
processes; async callers can run it in a thread.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import shutil
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from pathlib import Path

from . import processes
from .access import ClusterAccess
from .binaries import find_bin_dir
from .cluster_pki import ClusterPKI, write_cluster_pki
from .components import (
    LOOPBACK,
    Layout,
    Ports,
    Settings,
    apiserver_args,
    controller_manager_args,
    etcd_args,
    scheduler_args,
)
from .extras import Extras
from .images import Built
from .kubeconfig import write_kubeconfig
from .nodes import NodeSpec
from .probes import Pending, apiserver_pending, etcd_pending, rest_pending
from .processes import ProcessRecord
from .state import ClusterState, free_ports

log = logging.getLogger("vkpy.devcluster")

_PORT_ATTEMPTS = 3


class ClusterError(RuntimeError):
    """The dev cluster could not be started or stopped; the message says why."""


class ComponentFailed(ClusterError):
    """A component exited or never got ready; carries the tail of its log."""

    def __init__(self, component: str, problem: str, log_path: Path) -> None:
        self.component = component
        self.log_path = log_path
        self.log_tail = processes.tail(log_path)
        super().__init__(
            f"{component} {problem}. Last lines of {log_path}:\n{self.log_tail or '(empty)'}"
        )


class DevCluster:
    """A local control plane in `dir` (default `.cluster`)."""

    def __init__(
        self,
        dir: Path | str = ".cluster",
        verify_kubelet_certs: bool | None = None,
        *,
        settings: Settings | None = None,
        bin_dir: Path | None = None,
    ) -> None:
        settings = settings or Settings()
        if verify_kubelet_certs is not None:
            settings = replace(settings, verify_kubelet_certs=verify_kubelet_certs)
        self.settings = settings
        self.layout = Layout(Path(dir).absolute())
        self._bin_dir = bin_dir
        self._state: ClusterState | None = None

    # -- paths and identities -------------------------------------------------------

    @property
    def dir(self) -> Path:
        return self.layout.dir

    @property
    def pki(self) -> ClusterPKI:
        return self.layout.pki

    @property
    def kubeconfig(self) -> Path:
        """The admin kubeconfig (user kubernetes-admin, group system:masters)."""
        return self.layout.kubeconfig

    @property
    def state_file(self) -> Path:
        return self.layout.state

    @property
    def logs_dir(self) -> Path:
        return self.layout.logs

    @property
    def ca_cert(self) -> Path:
        """The cluster CA: signs the API server's serving cert and all client certs."""
        return self.pki.ca.cert

    @property
    def kubelet_ca_cert(self) -> Path:
        """The kubelet signing CA (kubelet-serving CSRs; `--kubelet-certificate-authority`)."""
        return self.pki.kubelet_ca.cert

    @property
    def kubelet_ca_key(self) -> Path:
        return self.pki.kubelet_ca.key

    @property
    def admin_cert(self) -> Path:
        return self.pki.admin.cert

    @property
    def admin_key(self) -> Path:
        return self.pki.admin.key

    @property
    def bin_dir(self) -> Path:
        """Where the control-plane binaries are (runs controlplane/build.sh if needed)."""
        state = self._state or self._read_state()
        if state is not None and self._bin_dir is None:
            return state.bin_dir
        if self._bin_dir is None:
            self._bin_dir = find_bin_dir()
        return self._bin_dir

    @property
    def kubectl(self) -> Path:
        return self.bin_dir / "kubectl"

    @property
    def state(self) -> ClusterState:
        """The running cluster's state; ClusterError when it was never started."""
        state = self._state or self._read_state()
        if state is None:
            raise ClusterError(f"no cluster state in {self.layout.state}: run `up` first")
        return state

    @property
    def server(self) -> str:
        """The API server URL, https://127.0.0.1:<port>."""
        return self.state.server

    def access(self) -> ClusterAccess:
        return ClusterAccess(kubeconfig=self.kubeconfig, kubectl=self.kubectl)

    def env(self) -> dict[str, str]:
        """KUBECONFIG, PATH (with the pinned kubectl first) and VKPY_CLUSTER_DIR."""
        return {**self.access().env(), "VKPY_CLUSTER_DIR": str(self.dir)}

    def extras(self) -> Extras:
        """metrics-server and the nodes started on top of this control plane."""
        return Extras(self.layout, self.access(), _child_env())

    def start_metrics_server(self) -> None:
        """Run metrics-server and register the metrics API (`kubectl top`, the HPA)."""
        self.extras().start_metrics_server()

    def start_registry(self, images: Sequence[str] | None = None) -> list[Built]:
        """Run the image registry and fill it with the images built here (registry.py)."""
        return self.extras().start_registry(images)

    def registries_setting(self) -> dict[str, object] | None:
        """The nodes' `registries:` mirrors setting for the running registry, or None."""
        return self.extras().registries_setting()

    def start_nodes(self, specs: Sequence[NodeSpec]) -> list[str]:
        """Start vkpy nodes (see nodes.py) and wait until they are Ready."""
        return self.extras().start_nodes(specs)

    def stop_nodes(self, names: set[str] | None = None) -> list[str]:
        """Stop nodes started by `start_nodes`, with their pods (all when `names` is None)."""
        return self.extras().stop_nodes(names)

    def is_running(self) -> bool:
        """True when every component recorded in state.json is running."""
        state = self._read_state()
        return state is not None and state.all_running()

    def running_components(self) -> list[str]:
        """Names of the recorded components that are still running."""
        state = self._read_state()
        if state is None:
            return []
        extras = Extras(self.layout, self.access(), _child_env()).running()
        return [p.name for p in state.processes if processes.is_running(p)] + extras

    # -- up -------------------------------------------------------------------------

    def up(self) -> bool:
        """Start the control plane and wait until it is ready.

        Returns False when a healthy cluster was already running in the directory
        (it is reused), True when one was started. Raises ComponentFailed with the
        component's log tail when something does not come up; nothing is left
        running then.
        """
        self.dir.mkdir(parents=True, exist_ok=True)
        with self._locked():
            previous = self._read_state()
            if previous is not None and self._reusable(previous):
                self._state = previous
                log.info("reusing the cluster already running in %s", self.dir)
                return False
            if previous is not None:
                self._stop(previous.processes)
            bin_dir = self._bin_dir or find_bin_dir()
            write_cluster_pki(self.pki.dir)
            preferred = list(previous.ports.to_json().values()) if previous else []
            attempt = 1
            while True:
                ports = Ports(*free_ports(5, preferred))
                try:
                    self._start(bin_dir, ports)
                    return True
                except ComponentFailed as e:
                    if attempt == _PORT_ATTEMPTS or "address already in use" not in e.log_tail:
                        raise
                    log.warning("%s lost a port race, retrying on new ports", e.component)
                preferred = []
                attempt += 1

    def _reusable(self, state: ClusterState) -> bool:
        if not state.all_running():
            return False
        if state.verify_kubelet_certs != self.settings.verify_kubelet_certs:
            raise ClusterError(
                f"the cluster running in {self.dir} has verify_kubelet_certs="
                f"{state.verify_kubelet_certs}; run `down` first to change it"
            )
        return apiserver_pending(self.pki, state.ports) is None

    def _start(self, bin_dir: Path, ports: Ports) -> None:
        began = time.monotonic()
        layout, settings = self.layout, self.settings
        server = f"https://{LOOPBACK}:{ports.apiserver}"
        self._write_kubeconfigs(server)
        records: list[ProcessRecord] = []

        def launch(name: str, argv: list[str]) -> ProcessRecord:
            record = processes.spawn(name, argv, layout.log(name), env=_child_env())
            records.append(record)
            self._save(snapshot(records))
            return record

        def snapshot(records: list[ProcessRecord]) -> ClusterState:
            return ClusterState(
                server, bin_dir, settings.verify_kubelet_certs, ports, tuple(records)
            )

        try:
            launch("etcd", etcd_args(bin_dir, layout, ports))
            self._wait(records, lambda: etcd_pending(self.pki, ports))
            launch("kube-apiserver", apiserver_args(bin_dir, layout, ports, settings))
            self._wait(records, lambda: apiserver_pending(self.pki, ports))
            launch(
                "kube-controller-manager", controller_manager_args(bin_dir, layout, ports, settings)
            )
            launch("kube-scheduler", scheduler_args(bin_dir, layout, ports))
            self._wait(records, lambda: rest_pending(self.pki, ports))
        except BaseException:
            self._stop(records)
            self._save(snapshot([]))
            raise
        log.info("control plane ready at %s in %.1f s", server, time.monotonic() - began)

    def _write_kubeconfigs(self, server: str) -> None:
        pki, layout = self.pki, self.layout
        users = [
            (layout.kubeconfig, pki.admin, "kubernetes-admin"),
            (layout.controller_manager_kubeconfig, pki.controller_manager, "kcm"),
            (layout.scheduler_kubeconfig, pki.scheduler, "scheduler"),
        ]
        for path, client, user in users:
            write_kubeconfig(path, server, pki.ca.cert, client, user)

    def _wait(
        self, started: Sequence[ProcessRecord], pending: Callable[[], Pending | None]
    ) -> None:
        """Poll until `pending()` is None; fail fast if any started process exits.

        `pending()` names the component still not ready and what it waits for, so a
        timeout shows the log of the component that is stuck.
        """
        deadline = time.monotonic() + self.settings.start_timeout
        while True:
            for record in started:
                code = processes.exit_code(record.pid)
                if code is not None or not processes.is_running(record):
                    raise ComponentFailed(record.name, f"exited (code {code})", record.log)
            waiting = pending()
            if waiting is None:
                return
            if time.monotonic() >= deadline:
                component, what = waiting
                timeout = self.settings.start_timeout
                problem = f"was not ready after {timeout:g} s (waiting for {what})"
                raise ComponentFailed(component, problem, self.layout.log(component))
            time.sleep(0.2)

    # -- down -----------------------------------------------------------------------

    def down(self, purge: bool = False) -> None:
        """Stop every process `up` started here (SIGTERM, then SIGKILL).

        The directory is kept (a later `up` restarts with the same data and PKI)
        unless `purge` is set, which deletes what the cluster wrote into it.
        """
        if not self.dir.exists():
            return
        with self._locked():
            state = self._read_state()
            if state is not None:
                api_up = apiserver_pending(self.pki, state.ports) is None
                Extras(self.layout, self.access(), _child_env()).stop_all(api_up)
                left = self._stop(state.processes)
                if left:
                    names = ", ".join(f"{r.name} (pid {r.pid})" for r in left)
                    raise ClusterError(f"could not stop {names}")
                self._save(replace(state, processes=()))
            if purge:
                self._purge()
        self._state = None

    def _stop(self, records: Sequence[ProcessRecord]) -> list[ProcessRecord]:
        """Stop etcd last: an API server whose etcd is gone hangs in its shutdown."""
        grace = self.settings.stop_grace
        left = processes.stop([r for r in records if r.name != "etcd"], grace)
        left += processes.stop([r for r in records if r.name == "etcd"], grace)
        return left

    def _purge(self) -> None:
        for path in self.layout.owned_paths():
            if path.is_dir():
                shutil.rmtree(path)
            else:
                path.unlink(missing_ok=True)
        with contextlib.suppress(OSError):
            self.dir.rmdir()  # only if nothing else is in it

    # -- faults ---------------------------------------------------------------------

    def kill_component(self, name: str) -> None:
        """SIGKILL one component, as a crash would (fault tests: an API server outage).

        Its data and port stay as they are; `restart_component` brings it back."""
        with self._locked():
            record = self._record(name)
            left = processes.kill([record])
            if left:
                raise ClusterError(f"could not kill {name} (pid {record.pid})")

    def restart_component(self, name: str) -> None:
        """Start a component that was killed again, with the same flags (so the same
        port, PKI and etcd data), and wait until the cluster serves again."""
        with self._locked():
            state = self.state
            old = self._record(name)
            if processes.is_running(old):
                raise ClusterError(f"{name} is still running (pid {old.pid})")
            record = processes.spawn(name, old.argv, old.log, env=_child_env())
            kept = tuple(record if p.name == name else p for p in state.processes)
            self._save(replace(state, processes=kept))
            ports = state.ports
            self._wait([record], lambda: apiserver_pending(self.pki, ports))
            self._wait([record], lambda: rest_pending(self.pki, ports))

    def _record(self, name: str) -> ProcessRecord:
        self._state = None
        for record in self.state.processes:
            if record.name == name:
                return record
        raise ClusterError(f"no component {name!r} in {self.layout.state}")

    # -- state ----------------------------------------------------------------------

    def _read_state(self) -> ClusterState | None:
        try:
            return ClusterState.from_json(self.layout.state.read_text())
        except FileNotFoundError:
            return None
        except (ValueError, KeyError, TypeError) as e:
            raise ClusterError(f"{self.layout.state} is unreadable ({e}); remove it") from e

    def _save(self, state: ClusterState) -> None:
        self._state = state
        tmp = self.layout.state.with_suffix(".tmp")
        tmp.write_text(state.to_json())
        tmp.replace(self.layout.state)

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        """Serialise `up`/`down` on one directory across processes."""
        with self.layout.lock.open("a") as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(f, fcntl.LOCK_UN)


def _child_env() -> dict[str, str]:
    """The components' environment: ours, minus what could point them elsewhere."""
    env = dict(os.environ)
    env.pop("KUBECONFIG", None)
    return env


@contextlib.contextmanager
def given_or_started(kubeconfig: Path | None, workdir: Path) -> Iterator[ClusterAccess]:
    """The cluster `kubeconfig` points at, or a dev cluster started in `workdir`
    and stopped on exit: what the benchmarks run against."""
    if kubeconfig is not None:
        yield ClusterAccess(kubeconfig=kubeconfig, kubectl=find_bin_dir() / "kubectl")
        return
    cluster = DevCluster(workdir / "cluster")
    cluster.up()
    try:
        yield cluster.access()
    finally:
        cluster.down()
