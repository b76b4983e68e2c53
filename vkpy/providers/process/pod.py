"""One pod of the backend: its init sequence, its containers, its state on disk.

`PodRuntime` runs the kubelet's pod lifecycle: init containers one after another,
each to a successful exit (restartable "sidecar" init containers are started and
kept running), then every app container under its restart policy. A failed init
container fails a pod that never restarts; otherwise it is restarted with backoff
while the pod stays Pending. When the app containers are done for good, sidecars
are stopped. Ephemeral containers (`kubectl debug`, see ephemeral.py) are added
while the pod runs and run once each. `load` rebuilds a runtime from its directory
after a restart of vkpy, adopting running supervisors and reading what ended meanwhile.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
from collections.abc import Callable, Sequence

from vkpy.core.cancelling import cancel_and_wait
from vkpy.providers.base import ContainerConfig, PodConfig, PodEvent, PodRef, PodState
from vkpy.providers.errors import InvalidInputError
from vkpy.providers.process import ociephemeral
from vkpy.providers.process.container import ContainerRunner
from vkpy.providers.process.ephemeral import ephemeral_config, prepare_ephemeral_root
from vkpy.providers.process.filesystem import prepare_pod, refresh_files
from vkpy.providers.process.layout import PodDir, read_json, write_json
from vkpy.providers.process.persist import pod_from_dict, pod_to_dict
from vkpy.providers.process.phase import at, pod_phase
from vkpy.providers.process.runtime import Runtime

MIN_GRACE = 2.0
"""Seconds each sidecar gets to stop at least (the kubelet's minimum grace period)."""

log = logging.getLogger(__name__)


class PodRuntime:
    def __init__(
        self,
        runtime: Runtime,
        config: PodConfig,
        pod_dir: PodDir,
        notify: Callable[[PodRef], None],
        created: float,
    ) -> None:
        self.runtime = runtime
        self.config = config
        self.dir = pod_dir
        self.created = created
        self._notify = notify
        self.inits = [
            ContainerRunner(
                runtime,
                config,
                pod_dir,
                c,
                "sidecar" if c.spec.get("restartPolicy") == "Always" else "init",
                self._changed,
            )
            for c in config.init_containers
        ]
        self.apps = [
            ContainerRunner(runtime, config, pod_dir, c, "app", self._changed)
            for c in config.containers
        ]
        self.ephemerals = [
            ContainerRunner(runtime, config, pod_dir, c, "ephemeral", self._changed)
            for c in config.ephemeral_containers
        ]
        if self.inits:
            # The kubelet's word for a container of a pod with init containers that
            # has not started yet (init containers included), until it runs.
            for runner in (*self.inits, *self.apps):
                runner.waiting = ("PodInitializing", None)
        self.init_failed = False
        self._task: asyncio.Task[None] | None = None
        self._sidecars: list[asyncio.Task[None]] = []
        self._ephemeral_tasks: list[asyncio.Task[None]] = []

    @property
    def ref(self) -> PodRef:
        return self.config.ref

    @property
    def containers(self) -> list[ContainerRunner]:
        return [*self.inits, *self.apps, *self.ephemerals]

    def container(self, name: str) -> ContainerRunner | None:
        return next((c for c in self.containers if c.config.name == name), None)

    # --- making and finding pods -------------------------------------------------------

    @classmethod
    async def create(
        cls, runtime: Runtime, config: PodConfig, pod_dir: PodDir, notify: Callable[[PodRef], None]
    ) -> PodRuntime:
        """Make the pod's directory and volumes; the lifecycle starts with `start`."""
        await asyncio.to_thread(
            prepare_pod,
            pod_dir,
            config,
            runtime.volume_owner(config),
            runtime.config.host_path_prefixes,
            runtime.config.filesystem_per_pod,
            runtime.config.runtime != "oci",  # oci: host_paths.py makes them
        )
        pod = cls(runtime, config, pod_dir, notify, time.time())
        write_json(pod_dir.config, pod_to_dict(config))
        pod.save()
        return pod

    @classmethod
    def load(
        cls, runtime: Runtime, pod_dir: PodDir, notify: Callable[[PodRef], None]
    ) -> PodRuntime | None:
        """The pod in `pod_dir` as a restarted vkpy finds it; None if unreadable."""
        raw = read_json(pod_dir.config)
        state = read_json(pod_dir.state) or {}
        if raw is None:
            return None
        pod = cls(runtime, pod_from_dict(raw), pod_dir, notify, float(state.get("created", 0)))
        backoffs = state.get("backoff") or {}
        for runner in pod.containers:
            runner.backoff.restore(backoffs.get(runner.config.name))
            runner.restore()
            if runner.instance >= 0:
                runner.waiting = None
        return pod

    def save(self) -> None:
        write_json(
            self.dir.state,
            {
                "created": self.created,
                "backoff": {c.config.name: c.backoff.to_dict() for c in self.containers},
            },
        )

    def _changed(self) -> None:
        with contextlib.suppress(OSError):
            self.save()
        self._notify(self.ref)

    # --- lifecycle ----------------------------------------------------------------------

    def start(self) -> None:
        self._task = asyncio.create_task(self._lifecycle(), name=f"pod-{self.ref.uid}")
        for runner in self.ephemerals:
            self._start_ephemeral(runner)

    def _start_ephemeral(self, runner: ContainerRunner) -> None:
        task = asyncio.create_task(runner.run(), name=f"ephemeral-{runner.config.name}")
        self._ephemeral_tasks.append(task)

    async def add_ephemeral(self, containers: Sequence[ContainerConfig]) -> None:
        """Start the ephemeral containers not started yet (see ephemeral.py)."""
        known = {r.config.name for r in self.ephemerals}
        fresh = [
            ephemeral_config(self.config, c) for c in containers if c.name not in known
        ]  # all checked before any starts
        oci = self.runtime.oci is not None
        if oci:  # its image, root and confinement are runc's (ociephemeral.py)
            ociephemeral.check_added(self.config, fresh, self.runtime.config.allow)
        else:
            for warning in self.runtime.pool.check_added(self.config, fresh):
                self.runtime.report_event(
                    self.ref, PodEvent("Warning", "CapabilitiesNotGranted", warning)
                )
        for config in fresh:
            try:
                if not oci:  # oci: the container's root is its image's (ocicontainers.py)
                    await asyncio.to_thread(
                        prepare_ephemeral_root,
                        self.dir,
                        self.config,
                        config,
                        self.runtime.volume_owner(self.config),
                        self.runtime.config.filesystem_per_pod,
                    )
            except FileNotFoundError as error:  # a link the pod planted (beneath.py), ...
                raise InvalidInputError(str(error.args[0]), reason="FailedMount") from None
            self.config = dataclasses.replace(
                self.config, ephemeral_containers=(*self.config.ephemeral_containers, config)
            )
            write_json(self.dir.config, pod_to_dict(self.config))
            runner = ContainerRunner(
                self.runtime, self.config, self.dir, config, "ephemeral", self._changed
            )
            self.ephemerals.append(runner)
            self._start_ephemeral(runner)
        if fresh:
            self._changed()

    async def _lifecycle(self) -> None:
        try:
            for runner in self.inits:
                if runner.role == "sidecar":
                    self._start_sidecar(runner)
                    await runner.started_event.wait()
                    continue
                await runner.run()
                if runner.exit is None or runner.exit.exit_code != 0:
                    self.init_failed = True
                    self._changed()
                    await self._stop_sidecars()
                    return
            self._changed()
            async with asyncio.TaskGroup() as group:
                for app in self.apps:
                    group.create_task(app.run(), name=f"container-{app.config.name}")
            await self._stop_sidecars()
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("pod lifecycle failed", extra={"pod": str(self.ref)})
            raise

    def _start_sidecar(self, runner: ContainerRunner) -> None:
        task = asyncio.create_task(runner.run(), name=f"sidecar-{runner.config.name}")
        self._sidecars.append(task)

    async def _stop_sidecars(self) -> None:
        await cancel_and_wait(*self._sidecars)
        self._sidecars.clear()
        for runner in reversed(self.inits):
            if runner.role == "sidecar":
                await runner.stop(runner.pod_grace())
        self._changed()

    async def _cancel(self) -> None:
        await cancel_and_wait(self._task, *self._sidecars, *self._ephemeral_tasks)
        self._task = None
        self._sidecars.clear()
        self._ephemeral_tasks.clear()

    async def stop(self, grace: float) -> None:
        """Stop every container: app (and ephemeral) containers together, then the
        init containers and sidecars one at a time in reverse order, as the kubelet
        does, so a sidecar's preStop hook still reaches the sidecars started before
        it. They share what is left of the grace period (at least MIN_GRACE each)."""
        await self._cancel()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + grace
        await asyncio.gather(*(c.stop(grace) for c in (*self.ephemerals, *self.apps)))
        for runner in reversed(self.inits):
            await runner.stop(min(grace, max(deadline - loop.time(), MIN_GRACE)))

    async def close(self) -> None:
        """Stop watching; containers keep running for the next vkpy to adopt."""
        await self._cancel()
        for runner in self.containers:
            await runner.detach()

    # --- changes ------------------------------------------------------------------------

    async def refresh_volumes(self, config: PodConfig) -> None:
        await asyncio.to_thread(
            refresh_files,
            self.dir,
            config,
            self.runtime.volume_owner(config),
            self.runtime.config.filesystem_per_pod,
        )

    async def update(self, config: PodConfig) -> None:
        """Take changed images: the containers whose image changed are restarted."""
        images = {c.name: c.image for c in config.containers}
        for runner in self.apps:
            image = images.get(runner.config.name)
            if image is None or image == runner.config.image:
                continue
            new = next(c for c in config.containers if c.name == runner.config.name)
            runner.config = new
            runner.pod = config
            if runner.supervised is not None:
                runner.restart_requested = True
                task = asyncio.create_task(runner.kill(runner.pod_grace()), name="image-restart")
                runner.track(task)
        self.config = PodConfig(
            ref=self.config.ref,
            pod=config.pod,
            init_containers=self.config.init_containers,
            containers=tuple(r.config for r in self.apps),
            volumes=self.config.volumes,
            ephemeral_containers=self.config.ephemeral_containers,
        )
        write_json(self.dir.config, pod_to_dict(self.config))
        self._changed()

    # --- status -------------------------------------------------------------------------

    def state(self) -> PodState:
        inits = [c.state() for c in self.inits]
        apps = [c.state() for c in self.apps]
        phase = pod_phase(
            self.config.restart_policy,
            inits,
            [c.role == "sidecar" for c in self.inits],
            apps,
            self.init_failed,
        )
        return PodState(
            phase=phase,
            containers=tuple(apps),
            init_containers=tuple(inits),
            started_at=at(int(self.created * 1e9)) if self.created else None,
            pod_ip=self.runtime.pod_ip(self.ref),
            ephemeral_containers=tuple(c.state() for c in self.ephemerals),
        )
