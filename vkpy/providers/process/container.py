"""One container of a pod: start it, watch it, probe it, restart it, stop it.

`ContainerRunner.run` is the kubelet's per-container loop: start an instance (a
supervisor, see supervision.py), run its postStart hook and probes, wait for it to
end, and then decide per restart policy whether to start another one, after the
CrashLoopBackOff delay. Liveness and startup failures, and a failed postStart hook,
kill the instance (preStop hook, SIGTERM, SIGKILL after the grace period) and let the
loop decide. `stop` does the same for good when the pod goes away.

All state comes from the instance directories on disk (run.json, exit.json), so a
runner made after a restart of vkpy (`restore`) picks up a running supervisor, or
the exit status a supervisor wrote while vkpy was away. Cancelling `run` never
touches processes: vkpy shutting down leaves containers running.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import signal
import time
from collections.abc import Callable
from typing import Literal

from vkpy.core.cancelling import cancel_and_wait
from vkpy.providers.base import ContainerConfig, ContainerState, PodConfig, PodEvent
from vkpy.providers.process import idranges, ocicontainers
from vkpy.providers.process.actions import Outcome
from vkpy.providers.process.backoff import CrashBackoff, go_duration
from vkpy.providers.process.beneath import LinkRefused
from vkpy.providers.process.filesystem import mount_bases
from vkpy.providers.process.layout import InstanceDir, PodDir, read_json
from vkpy.providers.process.phase import at, terminated_state
from vkpy.providers.process.probes import ProbeKind, ProbeSpec, ProbeTracker, container_probes
from vkpy.providers.process.probes import run_probe as probe_loop
from vkpy.providers.process.records import ExitRecord, LaunchSpec, RunRecord
from vkpy.providers.process.runtime import Runtime, container_context
from vkpy.providers.process.supervision import SIGNAL_KILL, Supervised, collect, launch
from vkpy.providers.process.termination import prepare_message_file, with_message
from vkpy.providers.process.validation import memory_limit

log = logging.getLogger(__name__)

Role = Literal["init", "app", "sidecar", "ephemeral"]
MIN_GRACE = 2.0
"""The kubelet never gives a container less than this between SIGTERM and SIGKILL."""
KILL_WAIT = 10.0
AFTER_STARTUP: tuple[ProbeKind, ...] = ("liveness", "readiness")


class ContainerRunner:
    def __init__(
        self,
        runtime: Runtime,
        pod: PodConfig,
        pod_dir: PodDir,
        config: ContainerConfig,
        role: Role,
        changed: Callable[[], None],
    ) -> None:
        self.runtime = runtime
        self.pod = pod
        self.config = config
        self.role = role
        self.dir = pod_dir.container(config.name)
        self._pod_dir = pod_dir
        self._changed = changed
        settings = runtime.config
        self.backoff = CrashBackoff(
            settings.backoff_base_seconds,
            settings.backoff_max_seconds,
            settings.backoff_reset_seconds,
        )
        self.instance = -1
        self.run_record: RunRecord | None = None
        self.exit: ExitRecord | None = None
        self.previous_exit: ExitRecord | None = None
        self.supervised: Supervised | None = None
        self.waiting: tuple[str, str | None] | None = None
        self.image_id = ""
        """`runtime: oci`: the digest of the image the container runs (its imageID)."""
        self.trackers: dict[ProbeKind, ProbeTracker] = {}
        self.restart_requested = False
        self.started_event = asyncio.Event()
        """Set while an instance runs and has passed its startup probe (sidecars)."""
        self._launching: asyncio.Task[None] | None = None
        self._helpers: set[asyncio.Task[None]] = set()

    # --- restart policy -------------------------------------------------------------

    @property
    def restart_policy(self) -> str:
        if self.role == "sidecar":
            return "Always"
        if self.role == "ephemeral":
            return "Never"
        policy = self.pod.restart_policy
        if self.role == "init":
            return "Never" if policy == "Never" else "OnFailure"
        return policy

    def _should_restart(self) -> bool:
        if self.restart_requested:
            return True
        assert self.exit is not None
        policy = self.restart_policy
        return policy == "Always" or (policy == "OnFailure" and self.exit.exit_code != 0)

    @property
    def done(self) -> bool:
        """Ended and will not be started again."""
        return self.supervised is None and self.exit is not None and not self._should_restart()

    # --- state --------------------------------------------------------------------------

    def restore(self) -> None:
        """Pick up the newest instance on disk: adopt its supervisor or read its exit."""
        numbers = self.dir.instance_numbers()
        while numbers:
            newest = self.dir.instance(numbers[-1])
            if newest.run.exists() or newest.exit.exists():
                break
            numbers.pop()  # never started (vkpy stopped while launching): start again
        if not numbers:
            return
        self.instance = numbers[-1]
        instance = self.dir.instance(self.instance)
        if len(numbers) > 1:
            raw = read_json(self.dir.instance(numbers[-2]).exit)
            previous = ExitRecord.from_dict(raw) if raw else None
            self.previous_exit = previous and self._ended(previous, numbers[-2], compute=False)
        run_raw = read_json(instance.run)
        self.run_record = RunRecord.from_dict(run_raw) if run_raw else None
        exit_raw = read_json(instance.exit)
        if exit_raw is not None:
            self.exit = self._ended(ExitRecord.from_dict(exit_raw), self.instance)
            return
        if self.run_record is not None:
            self.supervised = Supervised.attach(self.run_record)
            if self.supervised is None:
                self.exit = self._ended(collect(instance, self.run_record), self.instance)

    def state(self) -> ContainerState:
        name, image = self.config.name, self.config.image
        last = (
            terminated_state(name, image, self.previous_exit, self.instance - 1)
            if self.previous_exit
            else None
        )
        if self.supervised is not None and self.run_record is not None:
            started = self.trackers["startup"].passing if "startup" in self.trackers else True
            readiness = self.trackers.get("readiness")
            return ContainerState(
                name=name,
                state="running",
                started_at=at(self.run_record.started_ns),
                restart_count=max(0, self.instance),
                ready=started and (readiness is None or readiness.passing),
                started=started,
                last_terminated=last,
                image=image,
                image_id=self._image_id(),
                container_id=f"process://{self.run_record.pid}",
            )
        if self.exit is not None:
            ended = terminated_state(name, image, self.exit, max(0, self.instance))
            if self.waiting is None:  # imageID: the kubelet reports it for an ended one too
                return dataclasses.replace(ended, last_terminated=last, image_id=self._image_id())
            reason, message = self.waiting
            return ContainerState(
                name=name,
                state="waiting",
                reason=reason,
                message=message,
                restart_count=max(0, self.instance),
                last_terminated=ended,
                image=image,
            )
        reason, message = self.waiting or ("ContainerCreating", None)
        return ContainerState(
            name=name, state="waiting", reason=reason, message=message, image=image
        )

    def _image_id(self) -> str:
        """The image's digest (`runtime: oci`; found in the store after a restart)."""
        node = self.runtime.oci
        if not self.image_id and node is not None:
            stored = node.store.lookup(ocicontainers.normalised(self.config.image))
            self.image_id = stored.image_id if stored is not None else ""
        return self.image_id

    def _notify(self) -> None:
        self._changed()

    # --- the loop -----------------------------------------------------------------------

    async def run(self) -> None:
        """Keep the container going per its restart policy; return once it is done.

        A bug here must not leave the container unattended: it is logged and the loop
        goes on after a pause."""
        while True:
            try:
                await self._run()
                return
            except Exception:
                log.exception(
                    "container loop failed, resuming",
                    extra={"pod": str(self.pod.ref), "container": self.config.name},
                )
                await asyncio.sleep(self.runtime.config.backoff_base_seconds)

    async def _run(self) -> None:
        while True:
            if self.supervised is None:
                if self.exit is not None:
                    if not self._should_restart():
                        self.waiting = None
                        self._notify()
                        return
                    await self._back_off()
                await self._start()
                if self.supervised is None:
                    continue
                fresh = True
            else:
                fresh = False
            await self._watch(fresh)

    async def _back_off(self) -> None:
        assert self.exit is not None
        finished = self.exit.finished_ns / 1e9
        delay = 0.0 if self.restart_requested else self.backoff.wait(finished, time.time())
        if delay > 0:
            ref = self.pod.ref
            current = go_duration(self.backoff.current(finished))
            self.waiting = (
                "CrashLoopBackOff",
                f"back-off {current} restarting failed container={self.config.name} "
                f"pod={ref.name}_{ref.namespace}({ref.uid})",
            )
            self._notify()
            await asyncio.sleep(delay)
        self.backoff.restarted(finished, time.time())
        self.restart_requested = False

    async def _start(self) -> None:
        number = self.instance + 1
        instance = self.dir.instance(number)
        instance.path.mkdir(mode=0o700, parents=True, exist_ok=True)
        refused: ExitRecord | None = None
        try:
            volumes = {v.name: v for v in self.pod.volumes}
            mounts = mount_bases(self._pod_dir, self.config, volumes)
            prepare_message_file(
                self.dir,
                self.config.spec,
                self.runtime.owner(self.pod.ref),
                mounts,
                shown=self.runtime.oci is None,
            )
        except LinkRefused as error:
            # The pod changed its root so that its path would lead elsewhere: not
            # followed (beneath.py), and the container is told why it cannot run.
            refused = ExitRecord(
                exit_code=128,
                finished_ns=time.time_ns(),
                reason="ContainerCannotRun",
                message=str(error),
            )
        except OSError as error:
            log.warning(
                "cannot prepare the termination message file",
                extra={"pod": str(self.pod.ref), "container": self.config.name, "error": error},
            )
        if self.runtime.oci is None:
            spec = self._launch_spec(instance)
        elif refused is None:
            spec, refused = await self._oci_launch_spec(instance)
        else:
            spec = ocicontainers.unused_spec(instance)
        self._launching = asyncio.create_task(self._launch(spec, number, refused), name="launch")
        await asyncio.shield(self._launching)

    async def _oci_launch_spec(self, instance: InstanceDir) -> tuple[LaunchSpec, ExitRecord | None]:
        """`runtime: oci`: the image pulled, the root unpacked, `runc run` to supervise
        (ocicontainers.py); waits with the container's reason while it cannot."""
        assert self.runtime.oci is not None
        os.chmod(instance.path, 0o711)  # noqa: S103 (the bundle below is runc's)
        ids = idranges.load(self._pod_dir.path)
        if ids is None:
            outcome: ocicontainers.Prepared | ExitRecord = ExitRecord(
                exit_code=128,
                finished_ns=time.time_ns(),
                reason="ContainerCannotRun",
                message="the pod has no id range (idrange.json is missing)",
            )
        else:
            outcome = await ocicontainers.prepare(
                self.runtime.oci, self, self._pod_dir, instance, ids
            )
        if isinstance(outcome, ExitRecord):
            return ocicontainers.unused_spec(instance), outcome
        self.image_id = outcome.image_id
        return outcome.launch, None

    def _launch_spec(self, instance: InstanceDir) -> LaunchSpec:
        settings = self.runtime.config
        parent = self.runtime.cgroup
        mode = self.runtime.memory_mode
        return LaunchSpec(
            argv=self.config.argv,
            context=container_context(self.runtime, self.pod, self._pod_dir, self.config),
            instance_dir=str(instance.path),
            log_max_bytes=settings.log_max_bytes,
            log_max_files=settings.log_max_files,
            memory_limit=memory_limit(self.config),
            memory_mode=mode,
            cgroup_parent=str(parent.path) if parent is not None and mode == "cgroup" else None,
            cgroup_name=f"{self.pod.ref.uid}_{self.config.name}_{instance.number}",
            watchdog_interval=settings.watchdog_interval,
            stdin_pipe=bool(self.config.spec.get("stdin")),
            stdin_once=bool(self.config.spec.get("stdinOnce")),
            tty=bool(self.config.spec.get("tty")),
        )

    async def _launch(self, spec: LaunchSpec, number: int, refused: ExitRecord | None) -> None:
        """Start an instance (unless `refused`: why it cannot run) and record the
        outcome, even if the caller was cancelled."""
        result: Supervised | ExitRecord
        try:
            result = refused or await launch(spec, self.runtime.config.python)
        except OSError as error:
            log.error(
                "cannot start a supervisor",
                extra={
                    "pod": str(self.pod.ref),
                    "container": self.config.name,
                    "error": str(error),
                },
            )
            result = ExitRecord(
                exit_code=128,
                finished_ns=time.time_ns(),
                reason="ContainerCannotRun",
                message=f"could not start the container's supervisor: {error}",
            )
        if self.exit is not None:
            self.previous_exit = self.exit
        self.instance = number
        self.exit = None
        self.waiting = None
        # Fresh probe state before anyone can read this instance's status: a container
        # with a readiness probe is not Ready until the probe says so.
        self.trackers = self._new_trackers()
        if isinstance(result, ExitRecord):
            self.run_record = None
            self.exit = self._ended(result, number)
            log.info(
                "container could not start",
                extra={
                    "pod": str(self.pod.ref),
                    "container": self.config.name,
                    "reason": result.reason,
                    "why": result.message,
                },
            )
            self._report_start_failure()
        else:
            self.supervised = result
            self.run_record = result.run
            log.info(
                "container started",
                extra={
                    "pod": str(self.pod.ref),
                    "container": self.config.name,
                    "pid": result.run.pid,
                    "instance": number,
                },
            )
        self.dir.prune()
        self._notify()

    def _new_trackers(self) -> dict[ProbeKind, ProbeTracker]:
        return {
            kind: ProbeTracker(spec) for kind, spec in container_probes(self.config.spec).items()
        }

    async def _watch(self, fresh: bool) -> None:
        """Probe (and run postStart for a fresh start) until the instance ends."""
        supervised = self.supervised
        record = self.run_record
        assert supervised is not None and record is not None
        started = time.monotonic() - max(0.0, time.time() - record.started_ns / 1e9)
        if not self.trackers:
            self.trackers = self._new_trackers()
        watcher = asyncio.create_task(self._probe_and_hook(fresh, started), name="probes")
        try:
            await supervised.wait()
        finally:
            await cancel_and_wait(watcher)
        self.started_event.clear()
        instance = self.dir.instance(self.instance)
        self.exit = self._ended(collect(instance, record), self.instance)
        self.supervised = None
        self._report_start_failure()
        log.info(
            "container ended",
            extra={
                "pod": str(self.pod.ref),
                "container": self.config.name,
                "exit_code": self.exit.exit_code,
                "reason": self.exit.reason,
            },
        )
        self._notify()

    async def _probe_and_hook(self, fresh: bool, started: float) -> None:
        hook = (self.config.spec.get("lifecycle") or {}).get("postStart")
        if fresh and hook:
            outcome = await self.runtime.actions.run(
                hook,
                self.config.spec,
                self.dir.instance(self.instance),
                self.pod_grace(),
                self.runtime.pod_ip(self.pod.ref),
            )
            if not outcome.ok:
                log.warning(
                    "postStart hook failed, killing the container",
                    extra={"pod": str(self.pod.ref), "container": self.config.name},
                )
                await self.kill(self.pod_grace())
                return
        startup = self.trackers.get("startup")
        if startup is not None:
            await probe_loop(startup, self._attempt, self._probe_changed, started)
        if not startup or startup.passing:
            self.started_event.set()
            self._notify()
        async with asyncio.TaskGroup() as group:
            for kind in AFTER_STARTUP:
                tracker = self.trackers.get(kind)
                if tracker is not None:
                    group.create_task(
                        probe_loop(tracker, self._attempt, self._probe_changed, started),
                        name=f"probe-{kind}",
                    )

    async def _attempt(self, spec: ProbeSpec) -> Outcome:
        outcome = await self.runtime.actions.run(
            spec.handler,
            self.config.spec,
            self.dir.instance(self.instance),
            spec.timeout,
            self.runtime.pod_ip(self.pod.ref),
        )
        if not outcome.ok:
            message = f"{spec.kind.capitalize()} probe failed: {outcome.message}"
            self._event("Warning", "Unhealthy", message)
        elif outcome.warning:
            message = f"{spec.kind.capitalize()} probe warning: {outcome.warning}"
            self._event("Warning", "ProbeWarning", message)
        return outcome

    def _ended(self, record: ExitRecord, number: int, compute: bool = True) -> ExitRecord:
        """How run `number` ended, with its termination message (termination.py)."""
        instance = self.dir.instance(number)
        return with_message(record, self.dir, instance, self.config.spec, compute)

    def _report_start_failure(self) -> None:
        """The kubelet's Warning Event for a container that could not be started."""
        if self.exit is not None and self.exit.reason == "ContainerCannotRun":
            self._event("Warning", "Failed", f"Error: {self.exit.message or 'cannot run'}")

    def _event(self, kind: Literal["Normal", "Warning"], reason: str, message: str) -> None:
        self.runtime.report_event(self.pod.ref, PodEvent(kind, reason, message, self.config.name))

    def _probe_changed(self, tracker: ProbeTracker) -> None:
        kind = tracker.spec.kind
        log.info(
            "probe result changed",
            extra={
                "pod": str(self.pod.ref),
                "container": self.config.name,
                "probe": kind,
                "passing": tracker.passing,
            },
        )
        if tracker.result is False and kind in ("liveness", "startup"):
            name = self.config.name
            self._event(
                "Normal", "Killing", f"Container {name} failed {kind} probe, will be restarted"
            )
            grace = tracker.spec.termination_grace
            self.track(
                asyncio.create_task(
                    self.kill(self.pod_grace() if grace is None else grace), name="probe-kill"
                )
            )
        self._notify()

    def track(self, task: asyncio.Task[None]) -> None:
        """Keep a helper task (a kill) referenced until it ends; cancelled on stop."""
        self._helpers.add(task)
        task.add_done_callback(self._helpers.discard)

    # --- stopping -------------------------------------------------------------------------

    def pod_grace(self) -> float:
        value = (self.pod.pod.get("spec") or {}).get("terminationGracePeriodSeconds")
        return 30.0 if value is None else float(value)

    async def kill(self, grace: float, pre_stop: bool = True) -> None:
        """preStop hook, SIGTERM to the process group, SIGKILL after the grace period."""
        supervised = self.supervised
        if supervised is None or not supervised.alive:
            return
        began = time.monotonic()
        hook = (self.config.spec.get("lifecycle") or {}).get("preStop")
        if pre_stop and hook and grace > 0:
            await self.runtime.actions.run(
                hook,
                self.config.spec,
                self.dir.instance(self.instance),
                grace,
                self.runtime.pod_ip(self.pod.ref),
            )
        remaining = max(grace - (time.monotonic() - began), MIN_GRACE)
        supervised.signal(signal.SIGTERM)
        try:
            async with asyncio.timeout(remaining):
                await supervised.wait()
            return
        except TimeoutError:
            pass
        supervised.signal(SIGNAL_KILL)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(KILL_WAIT):
                await supervised.wait()

    async def stop(self, grace: float) -> None:
        """Stop the container for good (its run loop is already cancelled)."""
        if self._launching is not None and not self._launching.done():
            with contextlib.suppress(Exception):
                await asyncio.shield(self._launching)
        readiness = self._readiness_while_stopping()
        try:
            await self.kill(grace)
        finally:
            await cancel_and_wait(readiness)
        for task in list(self._helpers):
            task.cancel()
        if self.supervised is not None and self.run_record is not None:
            if self.supervised.alive:
                log.warning(
                    "container did not end after SIGKILL",
                    extra={"pod": str(self.pod.ref), "container": self.config.name},
                )
                self.supervised.detach()
            instance = self.dir.instance(self.instance)
            self.exit = self._ended(collect(instance, self.run_record), self.instance)
            self.supervised = None

    def _readiness_while_stopping(self) -> asyncio.Task[None] | None:
        """The kubelet keeps probing readiness until the container has stopped (liveness
        and startup probes end with the pod's deletion)."""
        tracker = self.trackers.get("readiness")
        record = self.run_record
        startup = self.trackers.get("startup")
        if tracker is None or record is None or self.supervised is None:
            return None
        if startup is not None and not startup.passing:
            return None
        started = time.monotonic() - max(0.0, time.time() - record.started_ns / 1e9)
        loop = probe_loop(tracker, self._attempt, self._probe_changed, started)
        return asyncio.create_task(loop, name="probe-readiness-stopping")

    async def detach(self) -> None:
        """Stop watching the instance (vkpy closes); the container keeps running.

        A start under way is let finish (its supervisor is adopted next time)."""
        if self._launching is not None and not self._launching.done():
            with contextlib.suppress(Exception):
                async with asyncio.timeout(KILL_WAIT):
                    await asyncio.shield(self._launching)
        for task in list(self._helpers):
            task.cancel()
        if self.supervised is not None:
            self.supervised.detach()
