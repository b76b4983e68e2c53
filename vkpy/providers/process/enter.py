"""Entering a container's context: its cgroup, its user, its directory and environment.

Every process of a container starts the same way, whether it is the main process
(started by the supervisor), an exec probe, a lifecycle hook or a `kubectl exec`
session: join the container's cgroup while still privileged, drop to the
configured user, and execute with the container's environment and working directory.
`enter_ids` is that step as a pre-exec function for the single-threaded supervisor;
`python enter.py [--tty] <instance-dir> <argv...>` (see supervision.helper_argv) does it
from the outside, for a multi-threaded vkpy where pre-exec functions are unsafe: it
reads the context from the instance's spec.json and the cgroup from its run.json,
then replaces itself with the command (exit 127: not found, 126: cannot execute).
With `--tty` (`kubectl exec -t`), started in a new session with its standard streams
on a pseudo-terminal, it first makes that terminal the session's controlling terminal
(so the command gets ^C, job control and window-size changes) and sets TERM if the
container's environment has none.

Last, after dropping privileges, seccomp.py takes away capabilities, sets
`no_new_privs` and installs the seccomp filter.

Standard library only and importing nothing of vkpy, so it runs as a plain script
(`python -I -S enter.py`, no site, no package imports): it runs for every exec probe.
As a script it loads seccomp.py, standard library only too, from beside it.
"""

from __future__ import annotations

import fcntl
import json
import os
import sys
import termios
from typing import TYPE_CHECKING

if TYPE_CHECKING or __package__:
    from vkpy.providers.process import seccomp
else:  # a plain script: seccomp.py beside it, first on the path
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import seccomp

if TYPE_CHECKING:
    from vkpy.providers.process.records import ProcessContext

EXIT_NOT_FOUND = 127
EXIT_CANNOT_EXECUTE = 126


def join_cgroup(cgroup: str | os.PathLike[str]) -> None:
    """Move the calling process into the cgroup."""
    with open(os.path.join(cgroup, "cgroup.procs"), "w") as handle:
        handle.write(str(os.getpid()))


def drop_privileges(uid: int | None, gid: int | None, groups: list[int]) -> None:
    """Become the containers' user (only when running as root)."""
    if uid is not None and os.geteuid() == 0:
        os.setgroups(groups)
        os.setgid(gid if gid is not None else uid)
        os.setuid(uid)


def join_namespaces(paths: list[str] | tuple[str, ...]) -> None:
    """Join the pod's namespaces (namespaces.py) while still root; OSError if one is gone."""
    if not paths or os.geteuid() != 0:
        return
    import ctypes  # noqa: PLC0415 (only processes of pods with namespaces need it)

    libc = ctypes.CDLL(None, use_errno=True)
    for path in paths:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        try:
            if libc.setns(fd, 0) != 0:
                error = ctypes.get_errno()
                raise OSError(error, f"setns {path}: {os.strerror(error)}")
        finally:
            os.close(fd)


def enter_ids(
    context: ProcessContext, cgroup: str | os.PathLike[str] | None, tty: bool = False
) -> None:
    """In the new process, before it executes: join the pod's namespaces, take its
    terminal (`tty`, stdin is a pseudo-terminal and the process leads a new session),
    join the cgroup, then drop privileges."""
    join_namespaces(context.namespaces)
    if tty:
        take_terminal()
    if cgroup is not None:
        join_cgroup(cgroup)
    seccomp.prepare(context.capabilities, context.privileged)
    drop_privileges(context.uid, context.gid, list(context.groups))
    seccomp.confine(context.capabilities, context.privileged, context.seccomp)


def _read(path: str) -> dict[str, object] | None:
    try:
        with open(path) as handle:
            value = json.load(handle)
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def take_terminal() -> None:
    """Make the terminal on stdin the controlling terminal of this (new) session."""
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


def main(argv: list[str]) -> int:
    tty = len(argv) > 1 and argv[1] == "--tty"
    if tty:
        argv = [argv[0], *argv[2:]]
    if len(argv) < 3:
        print("usage: python enter.py [--tty] <instance-dir> <command...>")
        return 2
    instance = argv[1]
    command = argv[2:]
    spec = _read(os.path.join(instance, "spec.json")) or {}
    context = spec.get("context")
    if not isinstance(context, dict):
        print(f"vkpy: no container instance at {instance}", file=sys.stderr)
        return EXIT_CANNOT_EXECUTE
    run = _read(os.path.join(instance, "run.json")) or {}
    cgroup = str(run["cgroup"]) if run.get("cgroup") else None
    uid = context.get("uid")
    env = {str(k): str(v) for k, v in context["env"]}
    if tty:
        env.setdefault("TERM", "xterm")
        try:
            take_terminal()
            if uid is not None and os.geteuid() == 0:
                os.fchown(0, uid, -1)  # the terminal is the user's, as after login
        except OSError as error:
            print(f"vkpy: cannot take the terminal: {error.strerror}", file=sys.stderr)
    try:
        os.chdir(str(context["cwd"]))
        os.umask(int(context.get("umask", 0o022)))
        join_namespaces([str(n) for n in context.get("namespaces") or []])
        if cgroup is not None:
            join_cgroup(cgroup)
        caps, privileged = (
            [str(c) for c in context.get("capabilities") or []],
            bool(context.get("privileged")),
        )
        seccomp.prepare(caps, privileged)
        drop_privileges(uid, context.get("gid"), [int(g) for g in context.get("groups") or []])
        seccomp.confine(caps, privileged, bool(context.get("seccomp", True)))
        os.execvpe(command[0], command, env)  # noqa: S606 (argv, no shell)
    except FileNotFoundError:
        print(f"vkpy: {command[0]}: executable file not found", file=sys.stderr)
        return EXIT_NOT_FOUND
    except OSError as error:
        print(f"vkpy: {command[0]}: {error.strerror}", file=sys.stderr)
        return EXIT_CANNOT_EXECUTE
    return EXIT_CANNOT_EXECUTE  # not reached: execvpe does not return


if __name__ == "__main__":
    sys.exit(main(sys.argv))
