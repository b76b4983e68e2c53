"""Entering a container's context: its cgroup, its user, its directory and environment.

Every process of a container starts the same way, whether it is the main process
(started by the supervisor), an exec probe, a lifecycle hook or a `kubectl exec`
session: join the container's cgroup and the pod's namespaces while still privileged
(with the pod's filesystem, its volumes at their mount paths: podmounts.py), drop to the
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

import contextlib
import fcntl
import json
import os
import select
import signal
import sys
import termios
from types import ModuleType
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
    """Join the pod's namespaces (namespaces.py) while still root; OSError if one is gone.
    All are opened first and the mount namespace is joined last: once in it, /proc
    is the pod's."""
    if not paths or os.geteuid() != 0:
        return
    calls = _mountcalls()
    ordered = sorted(paths, key=lambda p: p.endswith("/mnt"))
    fds = []
    try:
        for path in ordered:
            fds.append(os.open(path, os.O_RDONLY | os.O_CLOEXEC))
        for path, fd in zip(ordered, fds, strict=True):
            calls.setns(fd, what=path)
    finally:
        for fd in fds:
            os.close(fd)


def _podmounts() -> ModuleType:
    from vkpy.providers.process import podmounts  # noqa: PLC0415 (only with a pod filesystem)

    return podmounts


def enter_pod(
    context: ProcessContext | dict[str, object], cgroup: str | os.PathLike[str] | None
) -> None:
    """Join the cgroup and the pod's namespaces and, with the pod's filesystem, attach
    the container's volumes (and a /proc of its PID namespace) in a private copy of
    its mount namespace (podmounts.py); then go to the working directory (joining a
    mount namespace left it). The PID namespace is entered before the fork that made
    this process (enter_pid_namespace)."""
    if isinstance(context, dict):
        namespaces = [str(n) for n in context.get("namespaces") or []]  # type: ignore[attr-defined]
        mounts = [list(m) for m in context.get("mounts") or []]  # type: ignore[attr-defined]
        readonly_root = bool(context.get("readonly_root"))
        pid_namespace = str(context.get("pid_namespace") or "")
        cwd = str(context["cwd"])
    else:
        namespaces = list(context.namespaces)
        mounts = [list(m) for m in context.mounts]
        readonly_root = context.readonly_root
        pid_namespace = context.pid_namespace
        cwd = context.cwd
    trees = None
    if any(n.endswith("/mnt") for n in namespaces) and os.geteuid() == 0:
        trees = _podmounts().open_volumes(mounts)  # while the host is still in view
    if cgroup is not None:
        join_cgroup(cgroup)
    join_namespaces(namespaces)
    if trees is None:
        os.chdir(cwd)
        return
    _podmounts().attach(trees, readonly_root, proc=bool(pid_namespace), cwd=cwd)


def enter_pid_namespace(path: str) -> None:
    """Make the next child of this process start in the PID namespace `path`."""
    if not path or os.geteuid() != 0:
        return
    calls = _mountcalls()
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        calls.setns(fd, calls.CLONE_NEWPID)
    finally:
        os.close(fd)


def _mountcalls() -> ModuleType:
    from vkpy.providers.process import mountcalls  # noqa: PLC0415 (only with namespaces)

    return mountcalls


RELAYED = (
    signal.SIGTERM,
    signal.SIGHUP,
    signal.SIGINT,
    signal.SIGQUIT,
    signal.SIGUSR1,
    signal.SIGUSR2,
    signal.SIGWINCH,
)


def _relay(child: int) -> int:
    """The parent left outside the pod's PID namespace: pass signals on to the
    command, end as it ended (same exit code, or killed by the same signal)."""

    def forward(signum: int, frame: object) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(child, signum)

    for number in RELAYED:
        signal.signal(number, forward)
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)  # the command's streams are its own: hold none of them open
    _, status = os.waitpid(child, 0)
    if os.WIFSIGNALED(status):
        killed = os.WTERMSIG(status)
        signal.signal(killed, signal.SIG_DFL)
        os.kill(os.getpid(), killed)
        return 128 + killed
    return os.WEXITSTATUS(status)


def _die_with_parent(alive: int) -> None:
    """In the forked command: be killed if the parent (what vkpy watches) goes; the
    parent holds the other end of the pipe `alive`."""
    import ctypes  # noqa: PLC0415

    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    readable, _, _ = select.select([alive], [], [], 0)
    if readable:  # end of file: the parent is already gone
        os._exit(EXIT_CANNOT_EXECUTE)
    os.close(alive)


def enter_ids(
    context: ProcessContext, cgroup: str | os.PathLike[str] | None, tty: bool = False
) -> None:
    """In the new process, before it executes: join the cgroup and the pod's
    namespaces (enter_pod), take its terminal (`tty`, stdin is a pseudo-terminal and
    the process leads a new session), then drop privileges."""
    enter_pod(context, cgroup)
    if tty:
        take_terminal()
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
    raw_prefix = spec.get("exec_prefix")
    prefix = [str(part) for part in raw_prefix] if isinstance(raw_prefix, list) else []
    if prefix:
        # runtime: oci: the container is runc's, and runc runs the command in it.
        target = str(spec.get("exec_target") or "")
        argv = [*prefix, *(["-t"] if tty else []), target, *command]
        try:
            os.execvp(argv[0], argv)  # noqa: S606 - runc exec, vkpy's own command line
        except OSError as error:
            print(f"vkpy: cannot run {argv[0]}: {error}", file=sys.stderr)
            return EXIT_CANNOT_EXECUTE
    run = _read(os.path.join(instance, "run.json")) or {}
    cgroup = str(run["cgroup"]) if run.get("cgroup") else None
    uid = context.get("uid")
    env = {str(k): str(v) for k, v in context["env"]}
    alive = -1
    pid_namespace = str(context.get("pid_namespace") or "")
    if pid_namespace and os.geteuid() == 0:
        try:
            enter_pid_namespace(pid_namespace)
        except OSError as error:
            print(f"vkpy: cannot enter the pod's processes: {error}", file=sys.stderr)
            return EXIT_CANNOT_EXECUTE
        alive, holder = os.pipe()
        child = os.fork()  # only a child starts in the namespace
        if child:
            os.close(alive)
            return _relay(child)
        os.close(holder)
        if tty:
            os.setsid()  # the terminal's session is the command's, not the relay's
    if tty:
        env.setdefault("TERM", "xterm")
        try:
            take_terminal()
            if uid is not None and os.geteuid() == 0:
                os.fchown(0, uid, -1)  # the terminal is the user's, as after login
        except OSError as error:
            print(f"vkpy: cannot take the terminal: {error.strerror}", file=sys.stderr)
    try:
        os.umask(int(context.get("umask", 0o022)))
        enter_pod(context, cgroup)
        caps = [str(c) for c in context.get("capabilities") or []]
        privileged = bool(context.get("privileged"))
        seccomp.prepare(caps, privileged)
        drop_privileges(uid, context.get("gid"), [int(g) for g in context.get("groups") or []])
        if alive >= 0:
            _die_with_parent(alive)
        seccomp.confine(caps, privileged, bool(context.get("seccomp", True)))
        os.execvpe(command[0], command, env)  # noqa: S606 (argv, no shell)
    except FileNotFoundError:
        print(f"vkpy: {command[0]}: executable file not found", file=sys.stderr)
        return EXIT_NOT_FOUND
    except OSError as error:
        print(f"vkpy: {command[0]}: {error.strerror or error}", file=sys.stderr)
        return EXIT_CANNOT_EXECUTE
    return EXIT_CANNOT_EXECUTE  # not reached: execvpe does not return


if __name__ == "__main__":
    # A plain script (-I): the package is three directories up, for podmounts.py.
    sys.path.append(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(__file__)))))
    sys.exit(main(sys.argv))
