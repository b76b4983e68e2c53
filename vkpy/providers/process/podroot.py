"""The pod's own root filesystem, built inside its mount namespace by its holder.

When vkpy runs as root, the pod's namespace holder (namespaces.py) runs this script
as `unshare --mount --uts --ipc [--pid --fork] python podroot.py <plan.json>`; it
builds the view every process of the pod will have, then stays (pid 1 of the pod's
PID namespace when it has one, reaping orphans) until vkpy kills it. The view:

- `/` is a recursive bind of the host's root (or of `pod_root`), read-only and
  nosuid all the way down: the pod sees the host's programs and libraries and can
  write none of it, not even where the host's own modes would let it;
- vkpy's state (`hide`: the pods directory, the state directory) is covered by an
  empty read-only tmpfs, so a pod never sees another pod's directory; the pod's own
  directory is bound back at its own path (the link layout and working directory of
  the fallback mode keep working, relative paths included);
- a private tmpfs on /tmp and /dev/shm (nosuid, nodev), shared by the pod's
  containers and by nothing else;
- per-pod files bound read-only over host files: /etc/hosts (the pod's IP and
  hostname, as the kubelet writes it) and /etc/hostname;
- the directories of the volumes vkpy writes (configMap, secret, downwardAPI,
  projected: `readonly`) read-only in the pod's directory too, as they are at their
  mount paths: their files belong to the pod's user (with the modes asked for), who
  can therefore neither write nor chmod them;
- with a PID namespace shared by the pod (`shareProcessNamespace`), a /proc of
  its own.

It is built from detached copies of the host's trees (mountcalls.py) attached on
`<pod-dir>/sandbox`, which then becomes the root with `pivot_root` (the old root
is detached, unreachable from the pod). Mount points that do not exist in the
read-only root are made on shadow tmpfs (podmounts.py), never in the host's
directories. Each container's volumes are attached per process (podmounts.py).

The mount points of the containers' volumes are made here too, once for the pod
(`mountpoints`), so that its processes find them. The plan (JSON): root, pod_dir,
staging, hide[], files[[source, target]], readonly[], tmpfs[], expose[] (host directories under
/tmp bound back read-only: where the pod's programs come from), mountpoints[[path, is a dir]],
proc, hostname, pid_file and error_file (names in pod_dir). Standard library only.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
from typing import Any

if __package__:
    from vkpy.providers.process import mountcalls as calls
    from vkpy.providers.process.podmounts import ALWAYS, MountPoints, shadow
else:  # run as a script: the package is three directories up
    sys.path.append(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(__file__)))))
    from vkpy.providers.process import mountcalls as calls
    from vkpy.providers.process.podmounts import ALWAYS, MountPoints, shadow

TMPFS_FLAGS = calls.MS_NOSUID | calls.MS_NODEV


def _inside(path: str, root: str) -> str | None:
    """`path` relative to `root` (both real), or None when it is not inside."""
    path, root = os.path.realpath(path), os.path.realpath(root)
    if path == root:
        return ""
    if path.startswith(root.rstrip("/") + "/"):
        return path[len(root.rstrip("/")) + 1 :]
    return None


def build(plan: dict[str, Any]) -> None:
    """Make the pod's view and enter it (pivot_root): see the module docstring."""
    calls.mount("none", "/", None, calls.MS_REC | calls.MS_PRIVATE)
    staging = str(plan["staging"])
    pod_dir = str(plan["pod_dir"])
    own = calls.open_tree(pod_dir)
    calls.set_attributes(own, ALWAYS)
    shown = []
    for path in plan.get("expose") or []:
        tree = calls.open_tree(str(path))
        calls.set_attributes(tree, calls.MOUNT_ATTR_RDONLY | calls.MOUNT_ATTR_NOSUID)
        shown.append((tree, str(path)))
    sources = []
    for source, target in plan.get("files") or []:
        tree = calls.open_tree(str(source), recursive=False)
        calls.set_attributes(tree, ALWAYS | calls.MOUNT_ATTR_RDONLY)
        sources.append((tree, str(target)))
    # The root: a tmpfs of ours holding a read-only bind of each top-level entry.
    shadow(str(plan["root"]), staging, calls.MOUNT_ATTR_RDONLY | calls.MOUNT_ATTR_NOSUID)
    for hidden in plan.get("hide") or []:
        relative = _inside(str(hidden), str(plan["root"]))
        if relative and os.path.isdir(os.path.join(staging, relative)):
            target = os.path.join(staging, relative)
            calls.mount("tmpfs", target, "tmpfs", TMPFS_FLAGS | calls.MS_RDONLY, "mode=711,size=4k")
    os.chdir(staging)
    calls.pivot_root(".", ".")
    calls.umount(".")
    os.chdir("/")
    points = MountPoints()
    points.made.add("/")
    points.shadows.append("/")  # sealed read-only with the rest
    for scratch in plan.get("tmpfs") or []:
        if os.path.isdir(scratch):
            calls.mount("tmpfs", scratch, "tmpfs", TMPFS_FLAGS, "mode=1777")
            points.made.add(scratch)  # the pod's own: mount points may be made in it
    calls.move_mount(own, points.get(pod_dir, True))
    for path in plan.get("readonly") or []:  # the kubelet-made volumes, seen from there
        if os.path.isdir(path):
            tree = calls.open_tree(str(path), recursive=False)
            calls.set_attributes(tree, ALWAYS | calls.MOUNT_ATTR_RDONLY)
            calls.move_mount(tree, str(path))
    for tree, path in shown:  # programs under /tmp on the host (a checkout there)
        with contextlib.suppress(OSError):
            calls.move_mount(tree, points.get(path, True))
    for tree, target in sources:
        calls.move_mount(tree, points.get(target, False))
    for target, directory in plan.get("mountpoints") or []:
        with contextlib.suppress(OSError):  # else made (or refused) by the process
            points.get(str(target), bool(directory))
    if plan.get("proc"):
        with contextlib.suppress(OSError):
            calls.umount("/proc")
        calls.mount("proc", points.get("/proc", True), "proc", TMPFS_FLAGS | calls.MS_NOEXEC, "")
    points.seal()


def _reap(signum: int, frame: object) -> None:
    with contextlib.suppress(ChildProcessError):
        while os.waitpid(-1, os.WNOHANG)[0] > 0:
            pass


def hold() -> None:
    """Stay, reaping whatever ends up our child (pid 1 of a PID namespace)."""
    signal.signal(signal.SIGCHLD, _reap)
    for number in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(number, signal.SIG_IGN)
    _reap(0, None)
    while True:
        signal.pause()


def _write(directory: int, name: str, text: str) -> None:
    """Write a file of the pod's directory (through a descriptor kept from before the
    root changed), atomically."""
    fd = os.open(f"{name}.tmp", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600, dir_fd=directory)
    with os.fdopen(fd, "w") as handle:
        handle.write(text)
    os.replace(f"{name}.tmp", name, src_dir_fd=directory, dst_dir_fd=directory)


def main(argv: list[str]) -> int:
    with open(argv[1]) as handle:
        plan = json.load(handle)
    # Our pid as the host sees it (/proc is still the host's here).
    pid = int(os.readlink("/proc/self"))
    pod_dir = os.open(str(plan["pod_dir"]), os.O_PATH | os.O_DIRECTORY)
    try:
        if plan.get("hostname"):
            calls.set_hostname(str(plan["hostname"]))
        build(plan)
    except OSError as error:
        _write(pod_dir, str(plan["error_file"]), f"{error}\n")
        return 1
    _write(pod_dir, str(plan["pid_file"]), f"{pid}\n")
    os.close(pod_dir)
    hold()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
