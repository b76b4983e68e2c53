"""One pod's life on this node: each step of `sync`, from its record.

`PodLife.sync` looks at a pod's record (the object on the API server, the stage of
its life here) and does the one thing due: write its deletion cost (once, when
asked for), create it in the backend, apply a changed spec, renew its tokens, read
its state and write it, kill it at its active deadline, report it lost, stop it and
delete it when it is being deleted, or stop what the API server no longer has. Each
step moves the record to its next stage; a retryable failure raises `Retry` and
leaves the record where it was, so the step is done again and never skipped. What
should wake the pod next (its timers by reason, or at once) is returned to the
controller, which owns the queue (next_wake).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
from collections.abc import Awaitable, Mapping
from typing import NoReturn, TypeVar

from vkpy.core import metrics
from vkpy.core.clock import Clock, utcnow
from vkpy.core.objects import KubeObject, containers_of, meta, spec, status
from vkpy.kube.client import ApiError, KubeClient
from vkpy.kube.events import NORMAL, WARNING
from vkpy.node.pods.cannot_start import (
    CONFIG_ERROR,
    ERR_IMAGE_PULL,
    IMAGE_PULL_BACK_OFF,
    affected,
    as_cannot_start,
    back_off_message,
    images_of,
    pull_delay,
    waiting,
)
from vkpy.node.pods.deadline import DEADLINE_MESSAGE, deadline_exceeded, deadline_state
from vkpy.node.pods.deletion_cost import DeletionCost
from vkpy.node.pods.keyed_queue import Retry
from vkpy.node.pods.lost import lost_state
from vkpy.node.pods.next_wake import Wake, timers
from vkpy.node.pods.pod_record import (
    NO_TOKENS,
    Absent,
    Created,
    Deleted,
    Final,
    PodRecord,
    PullBackOff,
    Stopping,
)
from vkpy.node.pods.pod_reporting import PodReporter
from vkpy.node.pods.pod_status import TERMINAL_PHASES
from vkpy.node.pods.polling import StatusFeed
from vkpy.node.pods.terminating import stop_reporting, terminal
from vkpy.node.podspec.admission import Rejection, SysctlPolicy, admit
from vkpy.node.podspec.env import ConfigError
from vkpy.node.podspec.ephemeral import EphemeralContainers
from vkpy.node.podspec.pod_config import build_pod_config, pod_volumes_config
from vkpy.node.podspec.pod_object import images, pod_path
from vkpy.node.podspec.volumes import (
    TokenGrant,
    TokenKey,
    TokenTracker,
    VolumeSource,
    files_digest,
    follows_sources,
    has_token_volumes,
    metadata_key,
)
from vkpy.node.settings import PodControllerSettings
from vkpy.providers.base import (
    KnowsImageUsers,
    PodConfig,
    PodRef,
    PodState,
    Provider,
    ReadsPullSecrets,
    ReadsVolumeFiles,
    RefreshesVolumes,
)
from vkpy.providers.errors import (
    AdmissionError,
    CannotStartError,
    InvalidInputError,
    NotFoundError,
    ProviderError,
    RetryableError,
    UnsupportedError,
)

T = TypeVar("T")
log = logging.getLogger(__name__)

TOKEN_RETRY = 10.0
"""Seconds before a failed token renewal is tried again (or the backend's retry_after)."""


class PodLife:
    """The steps of a pod's life; `sync` runs the ones due for one record."""

    def __init__(
        self,
        client: KubeClient,
        provider: Provider,
        states: StatusFeed,
        report: PodReporter,
        objects: VolumeSource,
        settings: PodControllerSettings,
        clock: Clock,
        ephemeral: EphemeralContainers,
    ) -> None:
        self._client = client
        self._ephemeral = ephemeral
        self._provider = provider
        self._states = states
        """Where pod states are read: the backend, or the poller standing in for it."""
        self._report = report
        self._objects = objects
        self._settings = settings
        self._clock = clock
        self._cost = DeletionCost(client, settings.deletion_cost)
        self._sysctls = SysctlPolicy.from_patterns(settings.allowed_unsafe_sysctls)
        # Checked once: isinstance against a runtime Protocol walks its members, and was
        # 4% of a pod burst's CPU when asked for every pod.
        self._reads_volume_files = isinstance(provider, ReadsVolumeFiles)
        self._reads_pull_secrets = isinstance(provider, ReadsPullSecrets)
        self._refresher = provider if isinstance(provider, RefreshesVolumes) else None
        self._image_user = provider.image_user if isinstance(provider, KnowsImageUsers) else None

    async def sync(self, r: PodRecord) -> Wake:
        """Do the steps due for the pod; what should wake it next is returned (when a
        step raises, `wake` still tells the timers its record now calls for)."""
        again = await self._steps(r)
        return self.wake(r, at_once=again)

    def wake(self, r: PodRecord, at_once: bool = False) -> Wake:
        """The pod's timers by reason as its record now stands (next_wake)."""
        return Wake(timers(r, self._clock.time()), at_once)

    async def _steps(self, r: PodRecord) -> bool:
        """The steps due for the record; True when it must be synced again at once."""
        pod = r.pod
        if pod is None:
            if r.in_backend:
                log.info("removing pod the API no longer has", extra={"pod": str(r.ref)})
                await self._stop(r, 0)
            return False
        if isinstance(r.stage, Deleted):
            return False
        if not r.cost_written:
            pod = await self._deletion_cost(r, pod)
        if meta(pod).get("deletionTimestamp"):
            await self._terminate(r, pod)
            return False
        terminal = status(pod).get("phase") in TERMINAL_PHASES
        if isinstance(r.stage, Stopping):
            await self._stop(r, self._grace_period(pod))  # a kill that did not finish
        if isinstance(r.stage, Absent):
            if terminal or not await self._create(r, pod):
                return False
        elif isinstance(r.stage, Created):
            await self._apply_spec_changes(r, pod)
            if terminal:
                return False  # the API has its final word; the backend's state no longer counts
            await self._refresh_volumes(r, pod)
        if not terminal:
            await self._ephemeral.sync(pod, r.ref)
        state = await self._current_state(r, pod)
        if state is None:
            return True  # lost by the backend: created again
        state = self._ephemeral.status(pod, r.ref, state)
        await self._report.write(r, pod, state, sandbox_ready=True)
        return False

    async def _deletion_cost(self, r: PodRecord, pod: KubeObject) -> KubeObject:
        """The pod deletion cost on a ReplicaSet's pod, once (deletion_cost); the pod
        as the API server's answer shows it, so the annotation's echo asks nothing."""
        answer = await self._cost.write(pod)
        if answer is None:
            return pod
        r.cost_written = True
        if r.present and r.older_than(answer):
            r.pod = answer
        return r.pod if r.pod is not None else pod

    # --- backend calls ------------------------------------------------------------

    async def _backend(self, operation: str, ref: PodRef, coro: Awaitable[T]) -> T:
        """Run a backend call with metrics, turning retryable errors into `Retry`."""
        started = self._clock.monotonic()
        try:
            result = await coro
            metrics.labelled(metrics.POD_OPERATIONS, operation, "ok").inc()
            return result
        except RetryableError as error:
            metrics.labelled(metrics.POD_OPERATIONS, operation, "retry").inc()
            raise Retry(f"{operation} {ref}: {error}", after=error.retry_after) from error
        except ProviderError:
            metrics.labelled(metrics.POD_OPERATIONS, operation, "error").inc()
            raise
        finally:
            metrics.labelled(metrics.POD_OPERATION_DURATION, operation).observe(
                self._clock.monotonic() - started
            )

    async def _config(
        self,
        pod: KubeObject,
        kept: Mapping[TokenKey, TokenGrant] | None = None,
        volumes_only: bool = False,
    ) -> tuple[PodConfig, float | None, dict[TokenKey, TokenGrant]]:
        """The backend's view of the pod, when its tokens are due for renewal, and the
        tokens it holds (`kept`: tokens handed out again while not due). With
        `volumes_only` (a volume refresh) the containers' environment is not read again."""
        allocatable: Mapping[str, str] = self._provider.node_resources().allocatable
        tokens = TokenTracker(self._objects, kept, utcnow(self._clock))
        if volumes_only:
            config = await pod_volumes_config(pod, tokens, self._settings.host_ip, allocatable)
        else:
            config = await build_pod_config(
                pod,
                tokens,
                self._settings.host_ip,
                allocatable,
                with_volume_files=self._reads_volume_files,
                with_pull_secrets=self._reads_pull_secrets,
                image_user=self._image_user,
            )
        due = None
        if tokens.refresh_at is not None and self._refresher is not None:
            due = tokens.refresh_at.timestamp()
        return config, due, tokens.grants

    # --- creating -----------------------------------------------------------------

    async def _create(self, r: PodRecord, pod: KubeObject) -> bool:
        """Start the pod in the backend; False when it is rejected (status written).
        A container that cannot start raises Retry (cannot_start): the pod stays
        Pending, Waiting with the kubelet's reason, and is tried again."""
        node_os = self._settings.operating_system or self._provider.node_info().operating_system
        rejection = admit(pod, node_os, self._sysctls)
        if rejection is not None:
            await self._reject(r, pod, rejection)
            return False
        await self._wait_for_pull_backoff(r, pod)
        try:
            config, token_due, grants = await self._config(pod)
        except ConfigError as error:
            await self._cannot_start(r, pod, CannotStartError(str(error), reason=CONFIG_ERROR))
        try:
            await self._backend("create", r.ref, self._provider.create_pod(config))
        except CannotStartError as error:
            await self._cannot_start(r, pod, error)
        except AdmissionError as error:
            await self._reject(r, pod, Rejection(error.reason, str(error)))
            return False
        except (InvalidInputError, UnsupportedError) as error:
            await self._cannot_start(r, pod, as_cannot_start(error))
        r.stage = Created(
            images=images(pod),
            token_due=token_due,
            volumes_due=self._next_volume_sync(pod),
            metadata_key=metadata_key(pod),
            tokens=grants or NO_TOKENS,
            files_digest=files_digest(config.volumes),
        )
        log.debug("pod created in backend", extra={"pod": str(r.ref), "uid": r.ref.uid})
        return True

    async def _cannot_start(
        self, r: PodRecord, pod: KubeObject, error: CannotStartError
    ) -> NoReturn:
        """Pending, the containers that cannot start Waiting with the error's reason, a
        Warning `Failed` Event (the recorder folds repeats into one), and Retry: after
        a failed pull not before the image back-off (cannot_start), otherwise with the
        queue's back-off capped at `config_retry_max` (the kubelet's sync back-off).
        Never Failed: the kubelet fails a pod only at admission."""
        message = str(error)
        names = affected(pod, error)
        log.info(
            "container cannot start, will retry",
            extra={"pod": str(r.ref), "reason": error.reason, "error": message},
        )
        state = waiting(error.reason, dict.fromkeys(names, message))
        await self._report.write(r, pod, state, sandbox_ready=False)
        if error.reason == ERR_IMAGE_PULL:
            self._report.event(pod, WARNING, "Failed", message)
            self._report.event(pod, WARNING, "Failed", f"Error: {ERR_IMAGE_PULL}")
            previous = r.stage.pull_backoff if isinstance(r.stage, Absent) else None
            failures = (previous.failures if previous is not None else 0) + 1
            until = self._clock.time() + pull_delay(failures)
            r.stage = Absent(PullBackOff(failures, until, tuple(images_of(pod, names).items())))
        else:
            self._report.event(pod, WARNING, "Failed", f"Error: {message}")
        raise Retry(
            f"pod {r.ref} cannot start: {message}",
            max_delay=self._settings.config_retry_max,
            quiet=True,
        )

    async def _wait_for_pull_backoff(self, r: PodRecord, pod: KubeObject) -> None:
        """While the image pull back-off runs, the containers wait with
        ImagePullBackOff (a `BackOff` Event each) and nothing is created: Retry at its
        end. An image changed since the failed pull is tried at once."""
        stage = r.stage
        backoff = stage.pull_backoff if isinstance(stage, Absent) else None
        if backoff is None:
            return
        wait = backoff.until - self._clock.time()
        failed = dict(backoff.images)
        if wait <= 0 or images_of(pod, tuple(failed)) != failed:
            return
        messages = {name: back_off_message(image) for name, image in failed.items()}
        state = waiting(IMAGE_PULL_BACK_OFF, messages)
        await self._report.write(r, pod, state, sandbox_ready=False)
        for name, text in messages.items():
            self._report.event(pod, NORMAL, "BackOff", text, name)
        self._report.event(pod, WARNING, "Failed", f"Error: {IMAGE_PULL_BACK_OFF}")
        raise Retry(
            f"pod {r.ref} waits for its image pull back-off", max_delay=wait, quiet=True, after=wait
        )

    async def _reject(self, r: PodRecord, pod: KubeObject, rejection: Rejection) -> None:
        """The kubelet's rejectPod: a Warning Event, and Failed without running anything."""
        log.warning(
            "pod rejected",
            extra={"pod": str(r.ref), "reason": rejection.reason, "error": rejection.message},
        )
        self._report.event(pod, WARNING, rejection.reason, rejection.message)
        message = f"Pod was rejected: {rejection.message}"
        state = PodState(phase="Failed", reason=rejection.reason, message=message)
        r.stage = Final(state)
        await self._report.write(r, pod, state, sandbox_ready=False)

    # --- while it runs --------------------------------------------------------------

    async def _apply_spec_changes(self, r: PodRecord, pod: KubeObject) -> None:
        assert isinstance(r.stage, Created)
        wanted = images(pod)
        applied = r.stage.images
        if applied is not None and applied != wanted:
            try:
                config, _, _ = await self._config(pod, r.stage.tokens)
                await self._backend("update", r.ref, self._provider.update_pod(config))
                self._report.event(pod, NORMAL, "Updated", "Applied the changed container images")
            except (UnsupportedError, InvalidInputError, ConfigError) as error:
                self._report.event(pod, WARNING, "FailedUpdate", str(error))
        r.stage = dataclasses.replace(r.stage, images=wanted)

    async def _refresh_volumes(self, r: PodRecord, pod: KubeObject) -> None:
        """Write the pod's volumes again when their sources may have changed: projected
        service account tokens before they expire, configMaps and secrets every
        `volume_sync_period` (the kubelet's sync), downward API volumes when the pod's
        labels or annotations changed. Tokens not due are kept (TokenTracker).

        Pods adopted after a restart have no known renewal time: they are renewed once
        at their first sync, which also learns the next time."""
        stage = r.stage
        assert isinstance(stage, Created)
        refresher = self._refresher
        if refresher is None:
            return
        now = self._clock.time()
        token_due = stage.token_due
        if token_due is None and has_token_volumes(pod):
            token_due = 0.0
        tokens_due = token_due is not None and now >= token_due
        resync_due = stage.volumes_due is not None and now >= stage.volumes_due
        labels = metadata_key(pod)
        if not (tokens_due or resync_due or labels != stage.metadata_key):
            return
        kept = None if tokens_due else stage.tokens
        grants = stage.tokens
        digest = stage.files_digest
        try:
            config, next_due, grants = await self._config(pod, kept, volumes_only=True)
            if tokens_due or files_digest(config.volumes) != digest:
                await self._backend("refresh", r.ref, refresher.refresh_volumes(config))
                digest = files_digest(config.volumes)
        except (ConfigError, ApiError, ProviderError, Retry) as error:
            log.warning(
                "volume refresh failed, will retry",
                extra={"pod": str(r.ref), "uid": r.ref.uid, "error": str(error)},
            )
            wait = max(TOKEN_RETRY, (error.after or 0.0) if isinstance(error, Retry) else 0.0)
            next_due = now + wait if tokens_due else stage.token_due
            labels = stage.metadata_key
        else:
            if tokens_due:
                log.info("pod volumes refreshed", extra={"pod": str(r.ref), "uid": r.ref.uid})
        if isinstance(r.stage, Created):
            r.stage = dataclasses.replace(
                r.stage,
                token_due=next_due,
                volumes_due=self._next_volume_sync(pod),
                metadata_key=labels,
                tokens=grants or NO_TOKENS,
                files_digest=digest,
            )

    def _next_volume_sync(self, pod: KubeObject) -> float | None:
        if self._refresher is None or not follows_sources(pod):
            return None
        return self._clock.time() + self._settings.volume_sync_period

    async def _current_state(self, r: PodRecord, pod: KubeObject) -> PodState | None:
        if isinstance(r.stage, Final):
            return r.stage.state
        try:
            state = await self._get_status(r)
        except NotFoundError:
            return self._lost(r, pod)
        self._report_warnings(r, pod, state.warnings)
        if deadline_exceeded(pod, state, self._clock.time()):
            self._report.event(pod, NORMAL, "DeadlineExceeded", DEADLINE_MESSAGE)
            r.stage = Stopping(final=deadline_state(state, utcnow(self._clock)))
            await self._stop(r, self._grace_period(pod))
            assert isinstance(r.stage, Final)
            return r.stage.state
        return state

    async def _get_status(self, r: PodRecord) -> PodState:
        """The backend's state of the pod; it covers every change pushed before it."""
        ref = r.ref
        r.unread_change = False
        try:
            state = await self._states.get_pod_status(ref)
        except RetryableError as error:
            metrics.labelled(metrics.POD_OPERATIONS, "status", "retry").inc()
            raise Retry(f"status {ref}: {error}", after=error.retry_after) from error
        metrics.labelled(metrics.POD_OPERATIONS, "status", "ok").inc()
        return state

    def _lost(self, r: PodRecord, pod: KubeObject) -> PodState | None:
        """The backend no longer has the pod: Failed for restartPolicy Never, else
        started again (as the kubelet restarts containers it lost): None, and the
        record is `Absent` for the next sync to create it."""
        policy = spec(pod).get("restartPolicy") or "Always"
        self._report.event(pod, WARNING, "BackendLost", "The backend no longer has the pod")
        if policy == "Never":
            log.warning("backend lost the pod, failing it", extra={"pod": str(r.ref)})
            r.stage = Final(lost_state(pod))
            return r.stage.state
        log.warning("backend lost the pod, creating it again", extra={"pod": str(r.ref)})
        r.stage = Absent()
        return None

    def _report_warnings(self, r: PodRecord, pod: KubeObject, warnings: tuple[str, ...]) -> None:
        """Each backend warning becomes one Warning Event on the pod, once."""
        for warning in warnings:
            if warning not in r.warned:
                r.warned = r.warned | {warning}
                self._report.event(pod, WARNING, "BackendAdjusted", warning)

    # --- ending -------------------------------------------------------------------

    def _grace_period(self, pod: KubeObject) -> float:
        value = meta(pod).get("deletionGracePeriodSeconds")
        if value is None:
            value = spec(pod).get("terminationGracePeriodSeconds")
        return float(self._settings.default_grace_period if value is None else value)

    async def _terminate(self, r: PodRecord, pod: KubeObject) -> None:
        """Graceful deletion: stop in the backend, then remove the object, once."""
        if r.in_backend:
            if isinstance(r.stage, Created):
                for container in containers_of(pod):
                    name = container.get("name")
                    self._report.event(pod, NORMAL, "Killing", f"Stopping container {name}", name)
            r.stage = Stopping()
            ended: list[PodState] = []
            stop = self._stop(r, self._grace_period(pod), ended)
            await stop_reporting(stop, lambda: self._report_stopping(r), self._clock)
            await self._report_ended(r, ended)
        try:
            await self._client.delete(
                pod_path(r.ref),
                {"gracePeriodSeconds": 0, "preconditions": {"uid": r.ref.uid}},
                decode=False,  # the watch tells what became of it
            )
            log.debug("pod deleted", extra={"pod": str(r.ref), "uid": r.ref.uid})
        except ApiError as error:
            if not (error.not_found or error.conflict):
                raise Retry(f"delete {r.ref}: {error}") from error
        r.stage = Deleted()

    async def _report_stopping(self, r: PodRecord) -> None:
        """The status of a pod being stopped (its readiness still changes)."""
        if r.pod is not None:
            with contextlib.suppress(NotFoundError):
                await self._report.write(r, r.pod, await self._get_status(r), sandbox_ready=True)

    async def _report_ended(self, r: PodRecord, ended: list[PodState]) -> None:
        """The status of a deleted pod's stopped containers, as the backend last knew
        them, before the object goes: a pod kept by a finalizer shows them terminated,
        in a terminal phase, as the kubelet's does."""
        if not ended or r.pod is None:
            return
        state = terminal(ended[0])
        try:
            await self._report.write(r, r.pod, state, sandbox_ready=False)
        except (NotFoundError, Retry) as error:
            log.info("final status not written", extra={"pod": str(r.ref), "error": str(error)})

    async def _stop(self, r: PodRecord, grace: float, ended: list[PodState] | None = None) -> None:
        """Stop the pod in the backend (gone already is fine); then it is final when
        a final state was decided, else absent. The backend's last state of the pod,
        when it gives one, is added to `ended`."""
        final = r.stage.final if isinstance(r.stage, Stopping) else None
        if not isinstance(r.stage, Stopping):
            r.stage = Stopping()
        with contextlib.suppress(NotFoundError):
            last = await self._backend("delete", r.ref, self._provider.delete_pod(r.ref, grace))
            if last is not None and ended is not None:
                ended.append(last)
        r.stage = Final(final) if final is not None else Absent()
