"""Kubernetes' rules for running a container from an image's config (pure functions).

- `command` replaces the image's ENTRYPOINT and drops its CMD; `args` replaces CMD;
  with neither, ENTRYPOINT + CMD run (the kubelet's documented table).
- The image's ENV comes first, the container's `env` overrides a name in place and
  appends the rest (containerd's order).
- `workingDir` wins over WORKDIR; with neither, `/`.
- `securityContext.runAsUser`/`runAsGroup` win over USER; a named user or group is
  looked up in the image's own /etc/passwd and /etc/group (as containerd does), and
  `runAsNonRoot` refuses root or a name it cannot verify (the kubelet's words).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from vkpy.oci.images.config import ImageConfig


class ContainerConfigError(ValueError):
    """What the kubelet reports as CreateContainerConfigError (or RunContainerError
    for a missing command): the container cannot be made from this image and spec."""


def command_line(image: ImageConfig, command: Sequence[str], args: Sequence[str]) -> list[str]:
    """The process's argv."""
    argv = [*command, *args] if command else [*image.entrypoint, *(args or image.cmd)]
    if not argv:
        raise ContainerConfigError("no command specified: the image has no ENTRYPOINT or CMD")
    return argv


def environment(image: ImageConfig, env: Sequence[tuple[str, str]]) -> list[tuple[str, str]]:
    """The image's ENV with the container's `env` over it."""
    merged = image.env_pairs()
    where = {name: i for i, (name, _) in enumerate(merged)}
    for name, value in env:
        if name in where:
            merged[where[name]] = (name, value)
        else:
            where[name] = len(merged)
            merged.append((name, value))
    return merged


def working_dir(image: ImageConfig, container_working_dir: str | None) -> str:
    return container_working_dir or image.working_dir or "/"


@dataclass(frozen=True)
class User:
    uid: int
    gid: int
    additional_gids: tuple[int, ...] = ()


def user(
    image: ImageConfig,
    rootfs: Path,
    run_as_user: int | None = None,
    run_as_group: int | None = None,
    run_as_non_root: bool = False,
) -> User:
    """Who the process runs as, ids inside the pod's user namespace."""
    name, _, group = image.user.partition(":")
    passwd = _table(rootfs / "etc/passwd")
    if run_as_non_root:
        _verify_non_root(name, run_as_user)
    if run_as_user is not None:
        uid = run_as_user
        gid = run_as_group if run_as_group is not None else _primary_gid(passwd, str(uid))
    else:
        uid = _uid(passwd, name or "0")
        if run_as_group is not None:
            gid = run_as_group
        elif group:
            gid = _gid(_table(rootfs / "etc/group"), group)
        else:
            gid = _primary_gid(passwd, name or "0")
    login = next((row[0] for row in passwd if len(row) > 2 and row[2] == str(uid)), None)
    extra = _member_of(_table(rootfs / "etc/group"), login, gid) if login else ()
    return User(uid, gid, extra)


def _verify_non_root(name: str, run_as_user: int | None) -> None:
    if run_as_user is not None:
        if run_as_user == 0:
            raise ContainerConfigError("container's runAsUser breaks non-root policy")
        return
    if name and not name.isdigit():
        raise ContainerConfigError(
            f"container has runAsNonRoot and image has non-numeric user ({name}), "
            "cannot verify user is non-root"
        )
    if not name or int(name) == 0:
        raise ContainerConfigError("container has runAsNonRoot and image will run as root")


def _table(path: Path) -> list[list[str]]:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return []
    return [line.split(":") for line in text.splitlines() if line and not line.startswith("#")]


def _uid(passwd: list[list[str]], name: str) -> int:
    if name.isdigit():
        return int(name)
    for row in passwd:
        if len(row) > 3 and row[0] == name and row[2].isdigit():
            return int(row[2])
    raise ContainerConfigError(f"unable to find user {name}: no matching entries in passwd file")


def _primary_gid(passwd: list[list[str]], name: str) -> int:
    for row in passwd:
        if len(row) > 3 and name in (row[0], row[2]) and row[3].isdigit():
            return int(row[3])
    if name.isdigit():
        return 0  # a uid the image does not list runs with group 0, as in containerd
    raise ContainerConfigError(f"unable to find user {name}: no matching entries in passwd file")


def _gid(groups: list[list[str]], name: str) -> int:
    if name.isdigit():
        return int(name)
    for row in groups:
        if len(row) > 2 and row[0] == name and row[2].isdigit():
            return int(row[2])
    raise ContainerConfigError(f"unable to find group {name}: no matching entries in group file")


def _member_of(groups: list[list[str]], login: str, gid: int) -> tuple[int, ...]:
    found = []
    for row in groups:
        member = len(row) > 3 and row[2].isdigit() and login in row[3].split(",")
        if member and int(row[2]) != gid:
            found.append(int(row[2]))
    return tuple(found)
