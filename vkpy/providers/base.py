"""The contract between the kubelet logic and a backend that runs pods.

A backend ("provider") makes pods run somewhere that is not a container runtime.
The kubelet side (vkpy.node, vkpy.api) does everything Kubernetes-shaped: it watches
the API server, resolves environment variables and volume contents, computes pod
conditions, writes status, serves the kubelet API. A backend only runs what it is
given and says what became of it. The contract is split by capability into small
Protocols, so a backend implements what it can and the API answers clearly (501)
for what it cannot:

- `Provider` (required): start/close, node info and resources, `ping`, and the pod
  lifecycle: `create_pod`, `update_pod`, `delete_pod`, `get_pod_status`, `list_pods`.
- `PushesStatus`: the backend calls back when a pod's state changes. A backend that
  cannot push is polled by the kubelet side (`vkpy.node.pods.polling.StatusPoller`).
- `RunsEphemeralContainers`: the backend runs `kubectl debug` containers.
- `ReportsEvents`: the backend tells of things that happened to a pod (a failed
  probe, a container killed for it), which become Events on the pod.
- `UsesPodCIDR`: the backend addresses pods from the Node's spec.podCIDRs.
- `RunsTasks`: the backend has long-lived tasks of its own (a status monitor);
  it declares them and the kubelet side runs them, supervised (vkpy.node.background).
- `ReadsVolumeFiles`: the backend wants volume contents (ConfigMaps, Secrets,
  tokens); others are spared the API calls.
- `ReadsPullSecrets`: the backend pulls images and wants the pod's registry logins.
- `RefreshesVolumes`: the backend takes renewed volume contents (service account
  tokens) for running pods.
- `LogsProvider`, `ExecProvider`, `AttachProvider`, `PortForwardProvider`,
  `StatsProvider`: the hooks of the kubelet HTTPS API.

Rules every backend follows:

- Identify pods by `PodRef.uid`: a pod deleted and recreated with the same name is a
  different pod.
- Raise the typed errors of `vkpy.providers.errors`, never bare exceptions on purpose:
  `RetryableError` for transient trouble (it is retried with backoff),
  `InvalidInputError`/`UnsupportedError` for pods the backend cannot run (reported on
  the pod and not retried), `NotFoundError` for unknown pods.
- Never log or put into an error message a value from `ContainerConfig.env` or a
  volume file: they may be secrets.
- Be idempotent: `create_pod` for a pod that already exists, and `delete_pod` for one
  that is gone, are not errors (`delete_pod` may raise NotFoundError, which is fine).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal, Protocol, runtime_checkable

from vkpy.core.objects import KubeObject

PodPhase = Literal["Pending", "Running", "Succeeded", "Failed", "Unknown"]
StateName = Literal["waiting", "running", "terminated"]
LogStream = Literal["stdout", "stderr"]


@dataclass(frozen=True, order=True)
class PodRef:
    """Which pod: namespace and name for people, uid for identity."""

    namespace: str
    name: str
    uid: str

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True)
class VolumeFile:
    """One file of a materialized volume (configMap, secret, downwardAPI, projected)."""

    path: str
    """Relative path inside the volume (already checked: no `..`, not absolute)."""
    data: bytes = field(repr=False)
    mode: int = 0o644


@dataclass(frozen=True)
class VolumeConfig:
    """A volume of the pod as the kubelet resolved it.

    `kind` is the pod spec's volume type (`emptyDir`, `configMap`, `secret`,
    `downwardAPI`, `projected`, `hostPath`, ...). For the kinds whose content the
    kubelet reads from the API server, `files` holds that content; `source` is the
    volume's spec as written, for the kinds a backend maps itself.
    """

    name: str
    kind: str
    source: KubeObject = field(default_factory=dict, repr=False)
    files: tuple[VolumeFile, ...] = ()


@dataclass(frozen=True)
class ContainerConfig:
    """One container, resolved by the kubelet side and ready to run.

    `command` and `args` have `$(VAR)` references expanded; `env` holds the final
    variables in order (values may be secrets: never log them).
    """

    name: str
    image: str
    command: tuple[str, ...]
    args: tuple[str, ...]
    env: tuple[tuple[str, str], ...] = field(default=(), repr=False)
    working_dir: str | None = None
    spec: KubeObject = field(default_factory=dict, repr=False)
    """The container's spec as written (ports, probes, resources, mounts, ...)."""

    @property
    def argv(self) -> tuple[str, ...]:
        """What to execute: command followed by args."""
        return self.command + self.args


@dataclass(frozen=True)
class RegistryCredential:
    """A login for an image registry, from one of the pod's `imagePullSecrets`."""

    server: str
    username: str
    password: str = field(repr=False)


@dataclass(frozen=True)
class PodConfig:
    """Everything a backend needs to run a pod."""

    ref: PodRef
    pod: KubeObject = field(repr=False)
    """The pod object as last seen from the API server (read-only)."""
    init_containers: tuple[ContainerConfig, ...]
    containers: tuple[ContainerConfig, ...]
    volumes: tuple[VolumeConfig, ...] = ()
    ephemeral_containers: tuple[ContainerConfig, ...] = ()
    """`kubectl debug` containers the backend runs (see `RunsEphemeralContainers`)."""
    registry_credentials: tuple[RegistryCredential, ...] = ()
    """Logins from the pod's `imagePullSecrets` (see `ReadsPullSecrets`)."""

    @property
    def restart_policy(self) -> str:
        value = (self.pod.get("spec") or {}).get("restartPolicy") or "Always"
        return str(value)


@dataclass(frozen=True)
class ContainerState:
    """What became of one container, in the terms of a Kubernetes ContainerStatus."""

    name: str
    state: StateName
    reason: str | None = None
    message: str | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None
    exit_code: int | None = None
    signal: int | None = None
    restart_count: int = 0
    ready: bool = False
    """Readiness as the backend knows it (its probes); running without probes = ready."""
    started: bool | None = None
    """Startup probe passed (None: the backend does not say; derived from running)."""
    last_terminated: ContainerState | None = None
    image: str = ""
    image_id: str = ""
    container_id: str = ""


@dataclass(frozen=True)
class PodState:
    """A backend's view of a pod. The kubelet side derives conditions from it."""

    phase: PodPhase
    containers: tuple[ContainerState, ...] = ()
    init_containers: tuple[ContainerState, ...] = ()
    reason: str | None = None
    message: str | None = None
    started_at: datetime | None = None
    pod_ip: str | None = None
    ephemeral_containers: tuple[ContainerState, ...] = ()
    warnings: tuple[str, ...] = ()
    """Adjustments the backend made that the user should know of (a memory size
    clamped to what the platform allows, ...). Each becomes one Warning Event on the
    pod, once."""


@dataclass(frozen=True)
class NodeInfo:
    """What the Node's status.nodeInfo and addresses say about this backend."""

    operating_system: str
    architecture: str
    runtime_name: str
    runtime_version: str
    kernel_version: str = ""
    os_image: str = ""
    labels: Mapping[str, str] = field(default_factory=dict)
    """Node labels the backend adds (e.g. how the process backend isolates pods)."""


@dataclass(frozen=True)
class NodeResources:
    """Capacity and allocatable as Kubernetes quantities (`{"cpu": "8", ...}`)."""

    capacity: Mapping[str, str]
    allocatable: Mapping[str, str]


StatusCallback = Callable[[PodRef], None]
"""Called by a backend, from the event loop, when a pod's state may have changed."""


@dataclass(frozen=True)
class PodEvent:
    """Something a backend saw happen to a pod that its user should read in `kubectl
    describe`, in the kubelet's words (`Unhealthy`: "Liveness probe failed: ...",
    `Killing`: "Container x failed liveness probe, will be restarted")."""

    type: Literal["Normal", "Warning"]
    reason: str
    message: str
    container: str | None = None
    """The container it is about (the Event's fieldPath), if any."""


EventCallback = Callable[[PodRef, PodEvent], None]
"""Called by a backend, from the event loop, for each `PodEvent` (see `ReportsEvents`)."""


@runtime_checkable
class Provider(Protocol):
    """The capabilities every backend has."""

    name: str
    """Short name, used in the taint, containerRuntimeVersion and logs."""

    async def start(self) -> None:
        """Open clients and resume state. Called once before any other call."""

    async def close(self) -> None:
        """Release everything. Pods keep running where the backend allows it."""

    def node_info(self) -> NodeInfo: ...

    def node_resources(self) -> NodeResources: ...

    async def ping(self) -> None:
        """Raise (any ProviderError) when the backend is unhealthy; the Node turns NotReady."""

    async def create_pod(self, pod: PodConfig) -> None:
        """Start running the pod. Returns once the backend accepted it."""

    async def update_pod(self, pod: PodConfig) -> None:
        """Apply a changed spec (image change, ...). UnsupportedError if it cannot."""

    async def delete_pod(self, ref: PodRef, grace_period: float) -> PodState | None:
        """Stop the pod (SIGTERM-like, then forcefully after `grace_period` s) and forget it.

        Returns once it no longer runs: its last state (its containers terminated)
        when the backend knew it at the end, else None."""

    async def get_pod_status(self, ref: PodRef) -> PodState:
        """The pod's current state; NotFoundError when the backend has no such pod."""

    async def list_pods(self) -> Sequence[PodRef]:
        """Pods the backend holds for this node (running or finished), for adoption."""


@runtime_checkable
class PushesStatus(Protocol):
    """A backend that tells when pods change (otherwise it is polled)."""

    def on_status_change(self, callback: StatusCallback) -> None:
        """Register the callback; called before `start`."""


@dataclass(frozen=True)
class BackgroundTask:
    """A long-lived task of a backend, run for the node's whole life.

    The kubelet side starts it after `Provider.start` and cancels it before
    `Provider.close`. When it raises or returns it is logged by `name` and started
    again with back-off; while it keeps failing (at once, if `critical`) the node is
    NotReady with its error, so a backend never goes quietly deaf. A backend never
    starts such tasks itself (no bare `asyncio.create_task`)."""

    name: str
    run: Callable[[], Coroutine[object, object, None]]
    critical: bool = False


@runtime_checkable
class UsesPodCIDR(Protocol):
    """A backend that gives pods addresses of their own from the Node's spec.podCIDRs
    (set by an admin or by kube-controller-manager's --allocate-node-cidrs)."""

    def set_pod_cidrs(self, cidrs: Sequence[str]) -> None:
        """The Node's spec.podCIDRs (or [podCIDR]) as last read; may be empty."""


@runtime_checkable
class RunsTasks(Protocol):
    """A backend with long-lived tasks of its own (monitors, pollers)."""

    def background_tasks(self) -> Sequence[BackgroundTask]:
        """Its tasks; asked once, after `start`."""


@runtime_checkable
class ReportsEvents(Protocol):
    """A backend that tells of things happening to its pods (probe failures, kills).

    The kubelet side turns each `PodEvent` into an Event on the pod, with repeats
    counted on one Event and a rate limit per pod, container and reason, so a backend
    reports every occurrence (each failed probe attempt, as the kubelet does)."""

    def on_event(self, callback: EventCallback) -> None:
        """Register the callback; called before `start`."""


@runtime_checkable
class RunsEphemeralContainers(Protocol):
    """A backend that runs ephemeral containers (`kubectl debug`) in a running pod.

    They are added to a pod's spec after it started, never removed, never restarted.
    Each runs once, in the context of its `targetContainerName` where it names one
    (the target's filesystem view and environment, as far as the backend has them),
    and is reported in `PodState.ephemeral_containers`; logs and attach reach it by
    name like any container. On a backend without this capability the kubelet side
    reports each one as terminated with a reason, and an Event, so kubectl stops
    waiting for it."""

    async def run_ephemeral_containers(
        self, ref: PodRef, containers: Sequence[ContainerConfig]
    ) -> None:
        """Start those of `containers` not started yet (it is called again with all of
        them, after a restart of vkpy too). NotFoundError for an unknown pod;
        InvalidInputError for a container that cannot run (reported on it)."""


@runtime_checkable
class ReadsVolumeFiles(Protocol):
    """A backend that puts the contents of configMap, secret, downwardAPI and projected
    volumes in front of its containers (`VolumeConfig.files`).

    Only for such a backend does the kubelet side read those objects and request
    service account tokens; any other backend gets each volume's kind and source
    alone, and costs the API server nothing for them."""

    reads_volume_files: Literal[True]


@runtime_checkable
class ReadsPullSecrets(Protocol):
    """A backend that pulls images itself and needs the pod's registry logins.

    Only for such a backend does the kubelet side read the pod's `imagePullSecrets`
    (kubernetes.io/dockerconfigjson or dockercfg) into `PodConfig.registry_credentials`;
    a missing Secret is skipped, as the kubelet does, and the pull may then fail."""

    reads_pull_secrets: Literal[True]


@runtime_checkable
class KnowsImageUsers(Protocol):
    """A backend that knows which user an image runs as (its USER), so the kubelet
    side can refuse `runAsNonRoot` for an image that would run as root, as the
    kubelet does (CreateContainerConfigError and a `Failed` Event)."""

    def image_user(self, image: str) -> int | None:
        """The uid `image` runs as when the pod names none; None: not known."""


@runtime_checkable
class RefreshesVolumes(Protocol):
    """A backend that takes new contents for a running pod's volumes.

    Projected service account tokens expire. The kubelet side resolves a pod's volumes
    again when one of its tokens nears expiry (80% of its lifetime, or after 24 h, as
    the kubelet does) and hands the pod over with its volumes resolved again; the
    backend replaces the files it materialized (atomically per volume, so a reader
    never sees half a volume) without restarting containers. Backends that cannot are not asked."""

    async def refresh_volumes(self, pod: PodConfig) -> None:
        """Replace the contents of the pod's file volumes with `pod.volumes` (only
        the volumes are resolved again: `pod`'s container lists are empty)."""


@dataclass(frozen=True)
class LogQuery:
    """Which log lines to read. The backend honours all of it but `timestamps` and
    `limit_bytes`, which the kubelet API applies itself."""

    container: str
    follow: bool = False
    previous: bool = False
    since: datetime | None = None
    tail_lines: int | None = None
    streams: frozenset[LogStream] = frozenset({"stdout", "stderr"})


@dataclass(frozen=True)
class LogRecord:
    """One line (or chunk) of output, with when it was written."""

    time: datetime
    stream: LogStream
    data: bytes


@runtime_checkable
class LogsProvider(Protocol):
    def container_logs(self, ref: PodRef, query: LogQuery) -> AsyncIterator[LogRecord]:
        """Records in order; with `follow`, keeps going until the container ends.

        NotFoundError for an unknown pod or container."""


class ByteSource(Protocol):
    """Bytes from a client: stdin of exec/attach, or a forwarded connection's inbound side."""

    async def read(self) -> bytes:
        """The next chunk; b"" once the client closed its side (or went away).

        Input is buffered only up to a bound: a backend that reads slowly slows the
        client down, and one that never reads stalls it."""


class ByteSink(Protocol):
    """Bytes to a client: stdout/stderr of exec/attach, or a forwarded connection's
    outbound side."""

    async def write(self, data: bytes) -> None:
        """Send `data`; waits while the client is slow. Once the client has gone the
        data is dropped silently (the call is being cancelled anyway)."""

    async def close(self) -> None:
        """No more data will be written (the client sees the end of the stream).
        Closing twice is harmless."""


@dataclass(frozen=True)
class TerminalSize:
    """A terminal's size in character cells, as the client reports it."""

    width: int
    """Columns."""
    height: int
    """Rows."""


@dataclass
class StreamIO:
    """The client's streams for exec and attach; None where the client did not ask.

    With `tty` the command runs under a pseudo-terminal: there is no stderr (the
    terminal has one output, and stdout gets everything) and `resize` yields the
    client's terminal size, once it is known and after every change, to be applied
    to the terminal (TIOCSWINSZ). `resize` ends when the client stops sending sizes.
    """

    stdin: ByteSource | None
    stdout: ByteSink | None
    stderr: ByteSink | None
    tty: bool
    resize: AsyncIterator[TerminalSize] | None = None


@runtime_checkable
class ExecProvider(Protocol):
    async def exec_in_container(
        self, ref: PodRef, container: str, command: Sequence[str], io: StreamIO
    ) -> int:
        """Run `command` in the container's context and return its exit code.

        The context is the one the container's own process has: its environment,
        working directory, mounts and user. stdin is copied to the command until it
        ends (then the command's stdin is closed); the command's output goes to
        stdout/stderr, all of it written before returning. The kubelet side closes
        the sinks after the return and reports the exit code to the client.

        Cancellation means the client went away (or vkpy is stopping): end the
        command and everything it started, release what the call holds, then let
        the cancellation propagate. Never leave the command running.

        Raise NotFoundError for an unknown pod or container, and ProviderError (or
        UnsupportedError) with a message for the user when the command cannot be
        run at all: kubectl shows it as "Internal error occurred: <message>". A
        command that is not found may instead end with 127 and a message on stderr,
        as a shell says it.
        """


@runtime_checkable
class AttachProvider(Protocol):
    async def attach_to_container(self, ref: PodRef, container: str, io: StreamIO) -> int | None:
        """Connect the client to the container's main process until it ends.

        Output the process writes from now on goes to stdout/stderr; stdin goes to
        the process's stdin when the container has `stdin: true` (otherwise it is
        ignored). Return when the process ended (its exit code, or None if unknown)
        or, for `stdinOnce` containers, when stdin ended. Cancellation means the
        client detached: stop copying, but leave the process running. The kubelet
        side reports success to the client in all these cases, as the kubelet does.
        """


@runtime_checkable
class PortForwardProvider(Protocol):
    async def port_forward(
        self, ref: PodRef, port: int, inbound: ByteSource, outbound: ByteSink
    ) -> None:
        """Carry one TCP connection to the pod's `port` until both directions are done.

        `inbound` ending (b"") half-closes the connection towards the pod; the pod
        closing its side closes `outbound`. Raise ProviderError with a message for
        the user when the port cannot be reached (e.g. connection refused); it ends
        the client's whole port-forward session, so raise only for real failures.
        Cancellation (the client went away) closes the connection.
        """


@dataclass(frozen=True)
class ContainerStats:
    name: str
    start_time: datetime
    cpu_usage_core_seconds: float
    """Cumulative CPU time; never decreases for one container instance."""
    memory_working_set_bytes: int
    memory_usage_bytes: int
    memory_rss_bytes: int = 0


@dataclass(frozen=True)
class PodStats:
    ref: PodRef
    start_time: datetime
    containers: tuple[ContainerStats, ...]


@runtime_checkable
class StatsProvider(Protocol):
    async def pod_stats(self) -> Sequence[PodStats]:
        """A sample of every running pod's containers, taken now."""
