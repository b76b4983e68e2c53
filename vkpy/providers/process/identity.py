"""Who a pod's processes are: a uid and gid of the pod's own, kept while it exists.

Pods on one host are kept apart by the kernel's oldest boundary, users. When vkpy
runs as root, each pod gets an id from `pod_uid_range` that no other pod has (its
uid and its gid, the same number): another pod's `/proc/<pid>/environ`, `cwd` and
processes are then closed to it, and so is the pod's directory (root:<pod gid>,
0750). The id is recorded in the pod's directory (`identity.json`, written before
anything else there) so a restarted vkpy knows it, and it is free again only once
the pod's directory is gone and no process of it runs.

`runAsUser`, `runAsGroup`, `fsGroup` and `supplementalGroups` are honoured inside
the range and refused outside it (a pod cannot ask for root or a host user), as is
an id that is another pod's own. `privileged`, added capabilities and the host's
namespaces are refused unless the node allows them (privileges.py). When vkpy is
not root there is one identity, vkpy's: ids other than its own are refused.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from vkpy.core.objects import KubeObject
from vkpy.providers.base import ContainerConfig, PodConfig
from vkpy.providers.errors import RetryableError, UnsupportedError
from vkpy.providers.process import privileges
from vkpy.providers.process.config import RunAs
from vkpy.providers.process.idclaims import HostClaims
from vkpy.providers.process.layout import read_json, write_json

REASON = privileges.REASON
TOLERATED_EPHEMERAL = frozenset({"SYS_PTRACE"})
"""Capabilities an ephemeral container may ask for and run without (see check_added)."""


@dataclass(frozen=True)
class PodIdentity:
    """The pod's ids; `own` is the id no other pod has (None: vkpy is not root)."""

    node: str
    own: int | None = None
    uid: int | None = None
    """The pod's default user (`runAsUser` of the pod, else `own`)."""
    gid: int | None = None
    extra_ids: tuple[int, ...] = ()
    """Ids the pod asked for (runAsUser/runAsGroup/fsGroup/... of it and its containers)."""

    @property
    def owner(self) -> RunAs:
        """Owner of what the pod may write: its user, and its own group."""
        if self.own is None:
            return RunAs(None, None)
        return RunAs(self.uid, self.own, (self.own,), f"pod-{self.own}", private_group=self.own)

    def ids(self) -> frozenset[int]:
        return frozenset(
            i for i in (self.own, self.uid, self.gid, *self.extra_ids) if i is not None
        )

    def to_dict(self) -> dict[str, object]:
        return {
            "node": self.node,
            "own": self.own,
            "uid": self.uid,
            "gid": self.gid,
            "extra_ids": list(self.extra_ids),
        }

    @classmethod
    def from_dict(cls, raw: dict[str, object]) -> PodIdentity:
        def number(value: object) -> int | None:
            return int(value) if isinstance(value, int) else None

        extra = raw.get("extra_ids")
        return cls(
            node=str(raw.get("node") or ""),
            own=number(raw.get("own")),
            uid=number(raw.get("uid")),
            gid=number(raw.get("gid")),
            extra_ids=tuple(int(i) for i in extra) if isinstance(extra, list) else (),
        )

    def save(self, pod_dir: Path) -> None:
        write_json(pod_dir / "identity.json", self.to_dict())

    @classmethod
    def load(cls, pod_dir: Path) -> PodIdentity | None:
        raw = read_json(pod_dir / "identity.json")
        return cls.from_dict(raw) if isinstance(raw, dict) else None


@dataclass(frozen=True)
class ContainerIds:
    uid: int | None
    gid: int | None
    groups: tuple[int, ...]


def _security(obj: KubeObject | None) -> KubeObject:
    return (obj or {}).get("securityContext") or {}


def _pod_spec(pod: PodConfig) -> KubeObject:
    spec: KubeObject = pod.pod.get("spec") or {}
    return spec


def container_ids(
    identity: PodIdentity, pod: PodConfig, container: ContainerConfig
) -> ContainerIds:
    """The user, group and supplementary groups a container's processes have."""
    if identity.own is None:
        return ContainerIds(None, None, ())
    pod_security = _security(_pod_spec(pod))
    mine = _security(container.spec)
    uid = int(mine.get("runAsUser", identity.uid if identity.uid is not None else identity.own))
    gid = int(mine.get("runAsGroup", identity.gid if identity.gid is not None else identity.own))
    groups = {identity.own, gid}
    if pod_security.get("fsGroup") is not None:
        groups.add(int(pod_security["fsGroup"]))
    groups.update(int(g) for g in pod_security.get("supplementalGroups") or [])
    return ContainerIds(uid, gid, tuple(sorted(groups)))


def _requested(pod: PodConfig) -> list[tuple[str, int]]:
    """(what, id) for every id the pod asks for."""
    asked: list[tuple[str, int]] = []
    security = _security(_pod_spec(pod))
    for key in ("runAsUser", "runAsGroup", "fsGroup"):
        if security.get(key) is not None:
            asked.append((f"pod {key} {security[key]}", int(security[key])))
    for group in security.get("supplementalGroups") or []:
        asked.append((f"pod supplementalGroups {group}", int(group)))
    for container in (*pod.init_containers, *pod.containers, *pod.ephemeral_containers):
        mine = _security(container.spec)
        for key in ("runAsUser", "runAsGroup"):
            if mine.get(key) is not None:
                asked.append((f"container {container.name!r} {key} {mine[key]}", int(mine[key])))
    return asked


def _live_uids() -> set[int]:
    """The uids of every process on the host."""
    uids: set[int] = set()
    try:
        entries = os.listdir("/proc")
    except OSError:
        return uids
    for entry in entries:
        if entry.isdigit():
            try:
                uids.add(os.stat(f"/proc/{entry}").st_uid)
            except OSError:
                continue
    return uids


class IdPool:
    """The node's ids: which pod holds which, and a free one for a new pod."""

    def __init__(
        self,
        first: int,
        last: int,
        per_pod: bool,
        shared: RunAs,
        claims: HostClaims | None = None,
        allow: Iterable[str] = (),
    ) -> None:
        self.first = first
        self.last = last
        self.root = per_pod
        self.shared = shared
        """The one identity of every pod when ids are not per pod."""
        self.claims = claims
        """Host-wide claims on ids (idclaims.py): other nodes on this host see ours."""
        self.allow = frozenset(allow)
        """What the node's `allow` setting lets pods ask for (privileges.py)."""
        self._held: dict[str, PodIdentity] = {}
        self._dirs: dict[str, Path] = {}

    def hold(self, pod_uid: str, identity: PodIdentity, pod_dir: Path | None = None) -> None:
        """Record a pod's identity found on disk (after a restart)."""
        self._held[pod_uid] = identity
        if self.claims is not None and pod_dir is not None and identity.own is not None:
            self._dirs[pod_uid] = pod_dir
            self.claims.claim(identity.own, pod_dir, take_over=True)

    def release(self, pod_uid: str, places: Sequence[str] = ()) -> None:
        """The pod is gone; its own id is free again unless it still owns something
        below `places` (its hostPath directories: see owned.py and idclaims.py)."""
        identity = self._held.pop(pod_uid, None)
        pod_dir = self._dirs.pop(pod_uid, None)
        claims = self.claims
        if claims is not None and identity is not None and identity.own is not None and pod_dir:
            claims.keep(identity.own, pod_dir, places)

    def identity(self, pod_uid: str) -> PodIdentity | None:
        return self._held.get(pod_uid)

    def _owners(self, exclude: str) -> dict[int, str]:
        return {i.own: uid for uid, i in self._held.items() if i.own is not None and uid != exclude}

    def _check_shared(self, what: str, value: int) -> None:
        uid = self.shared.uid if self.shared.uid is not None else os.geteuid()
        gid = self.shared.gid if self.shared.gid is not None else os.getegid()
        if value == 0 or value not in (uid, gid):
            raise UnsupportedError(
                f"{what}: every pod of this node runs as {uid}:{gid} (vkpy is "
                "not root, or run_as is set), so it cannot be given another id",
                reason=REASON,
            )

    def _check(self, pod: PodConfig) -> list[int]:
        """The ids `pod` asks for, refused when outside the range or another pod's own."""
        asked = _requested(pod)
        owners = self._owners(pod.ref.uid)
        ids = []
        for what, value in asked:
            if not self.root:
                self._check_shared(what, value)
                continue
            if not self.first <= value <= self.last:
                raise UnsupportedError(
                    f"{what} is outside this node's pod id range {self.first}-{self.last} "
                    "(pod_uid_range): it could be root's or a host user's",
                    reason=REASON,
                )
            if value in owners:
                raise UnsupportedError(
                    f"{what} is the own id of another pod on this node", reason=REASON
                )
            ids.append(value)
        return ids

    def check_added(self, pod: PodConfig, containers: Iterable[ContainerConfig]) -> list[str]:
        """Refuse containers added to a running pod (ephemeral) that ask for ids or
        privileges the pod cannot have; returns warnings for what is tolerated.

        `kubectl debug` (its default profile) adds SYS_PTRACE to every ephemeral
        container: unless the node allows capabilities, that one is tolerated, not
        granted, with a warning: the container runs as the pod's user without
        capabilities (and the seccomp filter refuses ptrace)."""
        added = tuple(containers)
        warnings = []
        for container in added:
            caps = (_security(container.spec).get("capabilities") or {}).get("add") or []
            if caps and set(caps) <= TOLERATED_EPHEMERAL and "capabilities" not in self.allow:
                warnings.append(
                    f"container {container.name!r}: capabilities {', '.join(caps)} not "
                    "granted; it runs as the pod's user without capabilities"
                )
        privileges.check_containers(added, self.allow, _pod_spec(pod), TOLERATED_EPHEMERAL)
        identity = self._held.get(pod.ref.uid)
        allowed = identity.ids() if identity is not None else frozenset()
        for container in added:
            mine = _security(container.spec)
            for key in ("runAsUser", "runAsGroup"):
                value = mine.get(key)
                if value is not None and self.root and int(value) not in allowed:
                    raise UnsupportedError(
                        f"container {container.name!r} {key} {value} is not one of the pod's ids",
                        reason=REASON,
                    )
                if value is not None and not self.root:
                    self._check_shared(f"container {container.name!r} {key} {value}", int(value))
        return warnings

    def allocate(self, pod: PodConfig, node: str, pod_dir: Path | None = None) -> PodIdentity:
        """A new identity for `pod` (kept in the pool until `release`); with host
        claims, one no other node on this host has given to a pod in `pod_dir`."""
        privileges.check_pod(pod, self.allow)
        held = self._held.get(pod.ref.uid)
        if held is not None:
            return held
        asked = self._check(pod)
        if not self.root:
            identity = PodIdentity(node=node)
            self._held[pod.ref.uid] = identity
            return identity
        taken = {i for identity in self._held.values() for i in identity.ids()}
        taken.update(asked)
        security = _security(_pod_spec(pod))
        taken.update(_live_uids())
        # From the top: pods that ask for ids mostly ask for a range's low ones (1000).
        for candidate in range(self.last, self.first - 1, -1):
            if candidate in taken:
                continue
            if self.claims is not None and pod_dir is not None:
                if not self.claims.claim(candidate, pod_dir):
                    continue
                self._dirs[pod.ref.uid] = pod_dir
            uid = security.get("runAsUser")
            gid = security.get("runAsGroup")
            identity = PodIdentity(
                node=node,
                own=candidate,
                uid=int(uid) if uid is not None else candidate,
                gid=int(gid) if gid is not None else candidate,
                extra_ids=tuple(sorted(set(asked))),
            )
            self._held[pod.ref.uid] = identity
            return identity
        raise RetryableError(
            f"no free id left in pod_uid_range {self.first}-{self.last}: every id belongs "
            "to a pod or still has processes"
        )

    def exclusive_ids(self, pod_uid: str) -> frozenset[int]:
        """The pod's ids no other pod holds (whose processes can all be killed)."""
        identity = self._held.get(pod_uid)
        if identity is None or identity.own is None:
            return frozenset()
        others = {i for uid, other in self._held.items() if uid != pod_uid for i in other.ids()}
        mine = self._dirs.get(pod_uid)
        claims = self.claims
        if claims is not None:  # another node's pod owns an id this pod asked for
            asked = identity.ids() - {identity.own}
            others.update(i for i in asked if claims.held_by_other(i, mine))
        return frozenset(i for i in identity.ids() if i not in others)


def kill_processes(ids: frozenset[int]) -> None:
    """SIGKILL every process running as one of `ids` (a pod's own ids: whatever of the
    pod escaped its containers' sessions), until none is left."""
    for _ in range(50):
        found = False
        try:
            entries = os.listdir("/proc")
        except OSError:
            return
        for entry in entries:
            if not entry.isdigit():
                continue
            try:
                if os.stat(f"/proc/{entry}").st_uid in ids:
                    found = True
                    os.kill(int(entry), signal.SIGKILL)
            except OSError:
                continue
        if not found:
            return
        time.sleep(0.02)
