"""Entering a container's context: its cgroup, its user, its directory and environment.

Every process of a container starts the same way, whether it is the main process
(started by the supervisor), an exec probe, a lifecycle hook or (later) a `kubectl
exec` session: join the container's cgroup while still privileged, drop to the
configured user, and execute with the container's environment and working directory.
`enter_ids` is that step as a pre-exec function for the single-threaded supervisor;
`python -m vkpy.providers.process.enter [--tty] <instance-dir> <argv...>` does it
from the outside, for a multi-threaded vkpy where pre-exec functions are unsafe: it
reads the context from the instance's spec.json and the cgroup from its run.json,
then replaces itself with the command (exit 127: not found, 126: cannot execute).
With `--tty` (`kubectl exec -t`), started in a new session with its standard streams
on a pseudo-terminal, it first makes that terminal the session's controlling terminal
(so the command gets ^C, job control and window-size changes) and sets TERM if the
container's environment has none.

Standard library only, and small: it runs for every exec probe.
"""

from __future__ import annotations

import fcntl
import os
import sys
import termios
from pathlib import Path

from vkpy.providers.process import cgroups
from vkpy.providers.process.layout import read_json
from vkpy.providers.process.records import ProcessContext

EXIT_NOT_FOUND = 127
EXIT_CANNOT_EXECUTE = 126


def enter_ids(context: ProcessContext, cgroup: Path | None) -> None:
    """In the new process, before it executes: join the cgroup, then drop privileges."""
    if cgroup is not None:
        cgroups.join(cgroup)
    if context.uid is not None and os.geteuid() == 0:
        os.setgroups(list(context.groups))
        os.setgid(context.gid if context.gid is not None else context.uid)
        os.setuid(context.uid)


def take_terminal() -> None:
    """Make the terminal on stdin the controlling terminal of this (new) session."""
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


def main(argv: list[str]) -> int:
    tty = len(argv) > 1 and argv[1] == "--tty"
    if tty:
        argv = [argv[0], *argv[2:]]
    if len(argv) < 3:
        print("usage: python -m vkpy.providers.process.enter [--tty] <instance-dir> <command...>")
        return 2
    instance = Path(argv[1])
    command = argv[2:]
    spec = read_json(instance / "spec.json")
    if spec is None:
        print(f"vkpy: no container instance at {instance}", file=sys.stderr)
        return EXIT_CANNOT_EXECUTE
    context = ProcessContext.from_dict(spec["context"])
    run = read_json(instance / "run.json") or {}
    cgroup = Path(run["cgroup"]) if run.get("cgroup") else None
    env = dict(context.env)
    if tty:
        env.setdefault("TERM", "xterm")
        try:
            take_terminal()
            if context.uid is not None and os.geteuid() == 0:
                os.fchown(0, context.uid, -1)  # the terminal is the user's, as after login
        except OSError as error:
            print(f"vkpy: cannot take the terminal: {error.strerror}", file=sys.stderr)
    try:
        os.chdir(context.cwd)
        os.umask(context.umask)
        enter_ids(context, cgroup)
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
