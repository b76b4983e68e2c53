"""A simulated backend whose pods "run" on a clock, with faults on demand.

The sim backend lets every kubelet behaviour be exercised against the real control
plane without a real workload: pods start after a configurable latency, run for a
set time (or forever; `finite_run_seconds` ends only the pods that do not restart
Always, as programs that finish), turn ready after their probes' initial delay
(`probe_delays`; probes never fail), exit with a set code, restart per
restartPolicy, and a share of calls can fail with retryable errors. Each pod's
record is a small JSON file under the state directory, so the simulated platform
outlives vkpy itself (kill vkpy, start it again, and the pods are still "running").
A pod's state is a pure function of its record and the time, which keeps the
simulation deterministic.

Per-pod overrides, as annotations: `sim.vkpy.io/start-seconds`,
`sim.vkpy.io/run-seconds` (empty or "forever" to run until deleted),
`sim.vkpy.io/exit-code`; for logs and stats (vkpy.providers.sim.telemetry)
`sim.vkpy.io/log-lines-per-second`, `sim.vkpy.io/log-line-bytes`,
`sim.vkpy.io/cpu-cores` and `sim.vkpy.io/memory-bytes` (default: the container's
requests, else limits, else 0.1 core and 32 MiB). A value that is not a number is
invalid input.

`kubectl exec` runs a few built-in commands, attach echoes stdin, and port-forward
answers with a toy HTTP responder (vkpy.providers.sim.exec).
"""

from __future__ import annotations

import asyncio
import json
import logging
import platform
import random
import sys
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

from vkpy import __version__
from vkpy.core import jsoncodec
from vkpy.core.clock import SYSTEM_CLOCK, Clock, Timer
from vkpy.core.quantity import QuantityError, parse_quantity
from vkpy.providers.base import (
    ByteSink,
    ByteSource,
    ContainerConfig,
    LogQuery,
    LogRecord,
    NodeInfo,
    NodeResources,
    PodConfig,
    PodRef,
    PodState,
    PodStats,
    StatusCallback,
    StreamIO,
)
from vkpy.providers.errors import InvalidInputError, NotFoundError, RetryableError
from vkpy.providers.sim import telemetry, timeline
from vkpy.providers.sim.exec import attach_echo, exec_builtin, serve_port
from vkpy.providers.sim.record_files import RecordFiles
from vkpy.providers.sim.telemetry import LogShape

log = logging.getLogger(__name__)

ANNOTATION_PREFIX = "sim.vkpy.io/"
DEFAULT_CPU_CORES = 0.1
DEFAULT_MEMORY_BYTES = 32 * 2**20
DEFAULT_CAPACITY: Mapping[str, str] = {
    "cpu": "1000",
    "memory": "4Ti",
    "pods": "5000",
    "ephemeral-storage": "10Ti",
}


@dataclass(frozen=True)
class SimConfig:
    """Settings of the simulated platform (the `--provider-config` of `sim`)."""

    start_seconds: float = 0.0
    """Time from create until containers run."""
    run_seconds: float | None = None
    """How long each container runs before exiting; None: until deleted."""
    finite_run_seconds: float | None = None
    """How long each container of a pod whose restartPolicy is Never or OnFailure runs
    before it exits with `exit_code`, as a program that finishes would (a job's pod
    completes; kwok's "complete" stage); None: `run_seconds` applies to them too.
    Pods that restart Always keep `run_seconds`. A pod's annotation wins over both."""
    exit_code: int = 0
    """Exit code of containers that end."""
    restart_delay: float = 1.0
    """Pause before a restart (shown as CrashLoopBackOff)."""
    probe_delays: bool = False
    """Hold a running container not ready until its readiness (and startup) probe's
    initialDelaySeconds have passed since it started, as with a kubelet whose first
    probe succeeds; False: ready as soon as it runs. Probes never fail here."""
    failure_rate: float = 0.0
    """Share of backend calls that fail with a retryable error (fault injection)."""
    seed: int | None = None
    capacity: Mapping[str, str] = field(default_factory=lambda: dict(DEFAULT_CAPACITY))
    platform_dir: str | None = None
    """Where the simulated platform keeps its pods (default `<state-dir>/sim`).
    Replicas of one node (`--leader-elect`) share the platform, as replicas share a
    cloud account, by pointing this at one directory they can all write (0777)."""
    state_dir: str | None = None
    """vkpy's --state-dir: pod records live in `sim/` under it unless `platform_dir`
    is set; None (and no platform_dir) keeps them in memory only."""

    @classmethod
    def from_dict(cls, raw: Mapping[str, object], state_dir: str | None) -> SimConfig:
        known = {f for f in cls.__dataclass_fields__ if f != "state_dir"}
        unknown = set(raw) - known
        if unknown:
            raise ValueError(f"unknown sim settings: {', '.join(sorted(unknown))}")
        values = dict(raw)
        extra = values.pop("capacity", None) or {}
        if not isinstance(extra, Mapping):
            raise ValueError("capacity must map resource names to quantities")
        capacity = {**DEFAULT_CAPACITY, **{str(k): str(v) for k, v in extra.items()}}
        config = cls(**values, capacity=capacity, state_dir=state_dir)  # type: ignore[arg-type]
        if not 0 <= config.failure_rate < 1:
            raise ValueError("failure_rate must be in [0, 1)")
        return config


def _number(annotations: Mapping[str, str], key: str, default: float | None) -> float | None:
    raw = annotations.get(ANNOTATION_PREFIX + key)
    if raw is None:
        return default
    if raw.strip() in ("", "forever"):
        return None
    try:
        return float(raw)
    except ValueError:
        raise InvalidInputError(
            f"annotation {ANNOTATION_PREFIX}{key}={raw!r} is not a number",
            reason="InvalidSimAnnotation",
        ) from None


_UNSEEDED = random.Random()
"""The failure draws of every sim without a `seed` (nothing to reproduce there)."""


class SimProvider:
    """The simulated platform. See the module docstring."""

    name = "sim"

    def __init__(self, config: SimConfig, clock: Clock = SYSTEM_CLOCK) -> None:
        self._config = config
        self._clock = clock
        # a Mersenne Twister's state is 2.5 KiB: a node set of 1000 unseeded sims shares one
        self._random = random.Random(config.seed) if config.seed is not None else _UNSEEDED
        self._records: dict[str, timeline.Record] = {}
        self._timers: dict[str, Timer] = {}
        self._callback: StatusCallback | None = None
        self._dir = Path(config.state_dir) / "sim" if config.state_dir else None
        if config.platform_dir:
            self._dir = Path(config.platform_dir)
        self._files = RecordFiles(self._dir) if self._dir is not None else None
        self._env: dict[str, dict[str, dict[str, str]]] = {}
        """uid -> container -> environment, for `env` in exec (memory only: may be secret)."""
        self._attached: dict[str, set[asyncio.Event]] = {}

    # --- lifecycle of the backend -------------------------------------------------

    def on_status_change(self, callback: StatusCallback) -> None:
        self._callback = callback

    async def start(self) -> None:
        if self._dir is None:
            return
        self._dir.mkdir(parents=True, exist_ok=True)
        for path in self._dir.glob("*.json"):
            try:
                raw = json.loads(path.read_text())
                raw["containers"] = tuple(tuple(c) for c in raw["containers"])
                raw["usage"] = tuple(tuple(u) for u in raw.get("usage") or ())
                for name in ("init_containers", "ready_delays", "sidecars", "sidecar_ready_delays"):
                    raw[name] = tuple(raw.get(name) or ())
                record = timeline.Record(**raw)
            except (OSError, ValueError, TypeError) as error:
                log.warning(
                    "ignoring unreadable sim record", extra={"path": str(path), "error": str(error)}
                )
                continue
            self._records[record.uid] = record
            self._arm(record)
        log.info("sim platform resumed", extra={"pods": len(self._records)})

    async def close(self) -> None:
        for timer in self._timers.values():
            timer.cancel()
        self._timers.clear()
        if self._files is not None:
            await self._files.close()

    def node_info(self) -> NodeInfo:
        return NodeInfo(
            operating_system="linux",
            architecture="amd64",
            runtime_name="sim",
            runtime_version=__version__,
            kernel_version=platform.release(),
            os_image="vkpy simulated platform",
        )

    def node_resources(self) -> NodeResources:
        return NodeResources(capacity=self._config.capacity, allocatable=self._config.capacity)

    async def ping(self) -> None:
        return None

    def _run_seconds(self, restart_policy: str) -> float | None:
        """The run time of a pod's containers without an annotation (SimConfig)."""
        finite = self._config.finite_run_seconds
        if finite is not None and restart_policy in ("Never", "OnFailure"):
            return finite
        return self._config.run_seconds

    def _maybe_fail(self, operation: str) -> None:
        if self._config.failure_rate and self._random.random() < self._config.failure_rate:
            raise RetryableError(f"simulated transient failure in {operation}")

    # --- pods ----------------------------------------------------------------------

    async def create_pod(self, pod: PodConfig) -> None:
        self._maybe_fail("create_pod")
        if pod.ref.uid in self._records:
            return
        annotations = (pod.pod.get("metadata") or {}).get("annotations") or {}
        start = _number(annotations, "start-seconds", self._config.start_seconds) or 0.0
        run = _number(annotations, "run-seconds", self._run_seconds(pod.restart_policy))
        exit_code = _number(annotations, "exit-code", self._config.exit_code)
        log_rate = _number(annotations, "log-lines-per-second", 1.0) or 1.0
        if log_rate <= 0:
            raise InvalidInputError(
                f"annotation {ANNOTATION_PREFIX}log-lines-per-second must be positive",
                reason="InvalidSimAnnotation",
            )
        log_width = int(_number(annotations, "log-line-bytes", 0) or 0)
        cores = _number(annotations, "cpu-cores", None)
        memory = _number(annotations, "memory-bytes", None)
        sidecars = [c for c in pod.init_containers if c.spec.get("restartPolicy") == "Always"]
        record = timeline.Record(
            namespace=pod.ref.namespace,
            name=pod.ref.name,
            uid=pod.ref.uid,
            created=self._clock.time(),
            start_seconds=start,
            run_seconds=run,
            exit_code=int(exit_code or 0),
            restart_policy=pod.restart_policy,
            containers=tuple((sys.intern(c.name), sys.intern(c.image)) for c in pod.containers),
            init_containers=tuple(c.name for c in pod.init_containers),
            log_rate=log_rate,
            log_width=log_width,
            usage=tuple(_usage(c, cores, memory) for c in pod.containers),
            ready_delays=tuple(_ready_delay(c) for c in pod.containers)
            if self._config.probe_delays
            else (),
            sidecars=tuple(c.name for c in sidecars),
            sidecar_ready_delays=tuple(_ready_delay(c) for c in sidecars)
            if self._config.probe_delays
            else (),
        )
        self._records[record.uid] = record
        if any(c.env for c in pod.containers):  # most pods have none: no dict kept
            self._env[record.uid] = {c.name: dict(c.env) for c in pod.containers if c.env}
        await self._persist(record)
        self._arm(record)

    async def update_pod(self, pod: PodConfig) -> None:
        self._maybe_fail("update_pod")
        record = self._records.get(pod.ref.uid)
        if record is None:
            raise NotFoundError(f"sim has no pod {pod.ref}")
        images = dict(record.containers)
        changed = [(c.name, c.image) for c in pod.containers if images.get(c.name) != c.image]
        if changed:
            updated = timeline.Record(
                **{**asdict(record), "containers": tuple((c.name, c.image) for c in pod.containers)}
            )
            self._records[record.uid] = updated
            await self._persist(updated)
            self._notify(record.ref)

    async def delete_pod(self, ref: PodRef, grace_period: float) -> None:
        self._maybe_fail("delete_pod")
        record = self._records.pop(ref.uid, None)
        self._env.pop(ref.uid, None)
        for ended in self._attached.pop(ref.uid, set()):
            ended.set()
        timer = self._timers.pop(ref.uid, None)
        if timer:
            timer.cancel()
        if self._files is not None:
            await self._files.remove(ref.uid)
        if record is None:
            raise NotFoundError(f"sim has no pod {ref}")

    async def get_pod_status(self, ref: PodRef) -> PodState:
        self._maybe_fail("get_pod_status")
        record = self._records.get(ref.uid)
        if record is None:
            raise NotFoundError(f"sim has no pod {ref}")
        return timeline.state_at(record, self._clock.time(), self._config.restart_delay)

    async def list_pods(self) -> Sequence[PodRef]:
        return [r.ref for r in self._records.values()]

    # --- logs and stats ------------------------------------------------------------

    async def container_logs(self, ref: PodRef, query: LogQuery) -> AsyncIterator[LogRecord]:
        """The container's synthetic lines (see telemetry); follows on the sim clock."""
        record = self._records.get(ref.uid)
        if record is None:
            raise NotFoundError(f'pod "{ref.name}" is not running in the sim backend')
        now = self._clock.time()
        run = timeline.log_run(record, query, now, self._config.restart_delay)
        shape = LogShape(record.log_rate, record.log_width)
        lines, index = telemetry.records(query.container, run, shape, query, now)
        for line in lines:
            yield line
        if not query.follow:
            return
        while (upcoming := telemetry.next_record(query.container, run, shape, index)) is not None:
            at, line = upcoming
            delay = at - self._clock.time()
            if delay > 0:
                await self._clock.sleep(delay)
            if ref.uid not in self._records:
                return
            if line.stream in query.streams:
                yield line
            index += 1
        if run.end is not None and (rest := run.end - self._clock.time()) > 0:
            await self._clock.sleep(rest)  # the container is quiet until it exits

    async def pod_stats(self) -> Sequence[PodStats]:
        """Usage of every running pod's containers (CPU grows, memory is constant)."""
        now = self._clock.time()
        out: list[PodStats] = []
        for record in self._records.values():
            current, _, _ = timeline.runs(record, now, self._config.restart_delay)
            if current is None or (current.end is not None and now >= current.end):
                continue
            usage = record.usage or ((DEFAULT_CPU_CORES, DEFAULT_MEMORY_BYTES),) * len(
                record.containers
            )
            containers = tuple(
                telemetry.usage(name, current, now, cores, memory)
                for (name, _), (cores, memory) in zip(record.containers, usage, strict=False)
            )
            out.append(
                PodStats(
                    ref=record.ref, start_time=timeline.at(record.created), containers=containers
                )
            )
        return out

    # --- exec, attach, port-forward (built-ins: vkpy.providers.sim.exec) -----------

    def _running_record(self, ref: PodRef, container: str | None) -> timeline.Record:
        """The pod's record if `container` (or, with None, the pod) runs now."""
        record = self._records.get(ref.uid)
        if record is None:
            raise NotFoundError(f'pod "{ref.name}" is not running in the sim backend')
        state = timeline.state_at(record, self._clock.time(), self._config.restart_delay)
        if container is None:
            if state.phase != "Running":
                raise InvalidInputError(f"pod {ref} is not running ({state.phase})")
            return record
        for current in state.containers:
            if current.name == container:
                if current.state != "running":
                    raise InvalidInputError(
                        f'container "{container}" is not running ({current.state})'
                    )
                return record
        raise NotFoundError(f'container "{container}" not found in pod {ref}')

    async def exec_in_container(
        self, ref: PodRef, container: str, command: Sequence[str], io: StreamIO
    ) -> int:
        self._running_record(ref, container)
        env = self._env.get(ref.uid, {}).get(container, {})
        return await exec_builtin(ref, env, command, io)

    async def attach_to_container(self, ref: PodRef, container: str, io: StreamIO) -> int | None:
        record = self._running_record(ref, container)
        ended = asyncio.Event()
        attached = self._attached.setdefault(ref.uid, set())
        attached.add(ended)
        current, _, _ = timeline.runs(record, self._clock.time(), self._config.restart_delay)
        timer = None
        if current is not None and current.end is not None:
            delay = max(0.0, current.end - self._clock.time())
            timer = self._clock.call_later(delay, ended.set)
        try:
            await attach_echo(io, ended)
        finally:
            attached.discard(ended)
            if timer is not None:
                timer.cancel()
        return None

    async def port_forward(
        self, ref: PodRef, port: int, inbound: ByteSource, outbound: ByteSink
    ) -> None:
        self._running_record(ref, None)
        await serve_port(ref, port, inbound, outbound)

    # --- internals -----------------------------------------------------------------

    async def _persist(self, record: timeline.Record) -> None:
        """Write the record to the state dir (record_files.py)."""
        if self._files is None:
            return
        text = jsoncodec.dumps_text({f.name: getattr(record, f.name) for f in fields(record)})
        await self._files.write(record.uid, text)

    def _notify(self, ref: PodRef) -> None:
        if self._callback is not None:
            self._callback(ref)

    def _arm(self, record: timeline.Record) -> None:
        """Notify now, and again at the record's next state change."""
        self._notify(record.ref)
        upcoming = timeline.next_change(record, self._clock.time(), self._config.restart_delay)
        if upcoming is None:
            return

        def fire() -> None:
            self._timers.pop(record.uid, None)
            current = self._records.get(record.uid)
            if current is not None:
                self._arm(current)

        old = self._timers.pop(record.uid, None)
        if old:
            old.cancel()
        self._timers[record.uid] = self._clock.call_later(
            max(0.0, upcoming - self._clock.time()) + 0.01, fire
        )


def _ready_delay(container: ContainerConfig) -> float:
    """Seconds after a start until the container's first readiness/startup probe."""
    delays = [0.0]
    for kind in ("startupProbe", "readinessProbe"):
        probe = container.spec.get(kind) or {}
        try:
            delays.append(float(probe.get("initialDelaySeconds") or 0))
        except (TypeError, ValueError):
            continue
    return max(delays)


def _resource(container: ContainerConfig, name: str) -> float | None:
    resources = container.spec.get("resources") or {}
    for kind in ("requests", "limits"):
        value = (resources.get(kind) or {}).get(name)
        if value is not None:
            try:
                return float(parse_quantity(value))
            except QuantityError:
                return None
    return None


def _usage(
    container: ContainerConfig, cores: float | None, memory: float | None
) -> tuple[float, int]:
    """(CPU cores, memory bytes) the sim container uses: annotation, resources, default."""
    cpu = cores if cores is not None else _resource(container, "cpu")
    mem = memory if memory is not None else _resource(container, "memory")
    return (
        cpu if cpu and cpu > 0 else DEFAULT_CPU_CORES,
        int(mem) if mem and mem > 0 else DEFAULT_MEMORY_BYTES,
    )
