"""The per-container supervisor: owns one run of a container, outlives vkpy.

`python -m vkpy.providers.process.supervisor <instance-dir>/spec.json` forks; the
parent ("launcher") waits until the child reports on a pipe that the container's
process runs (or could not be executed), prints that report as one JSON line and
exits, so vkpy never has a long-lived child to reap and fresh and adopted
supervisors look the same to it. The child becomes the supervisor, in a session of
its own, detached from vkpy's pipes, so a SIGKILLed vkpy leaves it running. It:

- makes the container's cgroup (cgroup mode) and starts the process in it, as the
  configured user, in its own session and process group, with the container's
  environment and directory (enter.py);
- with `stdin_pipe` (containers with `stdin: true`), makes the process's stdin a
  FIFO that `kubectl attach` writes to; with `stdin_once` as well, the process reads
  a pipe the supervisor fills from the FIFO and closes when the first attach
  session's writer went away (the process then reads end of file);
- with `tty` (containers with `tty: true`), starts the process on a new
  pseudo-terminal (its controlling terminal), keeps the master side, logs what
  comes out of it as stdout and copies the stdin FIFO into it;
- writes `run.json` (its pid and the child's, with start times) and then copies the
  child's stdout and stderr into the log file, timestamped, rotated (logfile.py);
- forwards SIGTERM to the process group, and on SIGUSR1 kills every process of the
  container (group, session and cgroup) with SIGKILL;
- for a detached run (`runtime: oci`: `pid_file`), becomes a child subreaper
  (PR_SET_CHILD_SUBREAPER) and runs `runc run --detach`, the container's output
  going to the supervisor's pipes (given to the pod's root): once runc
  exited the container's init is the supervisor's child, so its exit status is
  exact, and no runc process is kept per container;
- in watchdog mode (no cgroup), sums the resident memory of the session's processes
  every `watchdog_interval` and kills them all when they exceed the limit (OOMKilled);
- when the main process ends, kills what is left of the container (as a container
  runtime does when a container's init process exits), drains the pipes, writes
  `exit.json` (exit code or signal, finish time, OOMKilled from the cgroup's oom_kill
  counter or the watchdog) and exits.

Standard library only, so it starts fast and depends on nothing vkpy loads.
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import functools
import json
import os
import selectors
import signal
import struct
import subprocess
import sys
import termios
import time
import traceback
from pathlib import Path
from types import FrameType

from vkpy.providers.process import cgroups, proc
from vkpy.providers.process.enter import enter_ids, enter_pid_namespace
from vkpy.providers.process.layout import InstanceDir, read_json, write_json
from vkpy.providers.process.logfile import LogWriter
from vkpy.providers.process.records import (
    EXIT_CANNOT_RUN,
    STDIN_FIFO,
    ExitRecord,
    LaunchSpec,
    ProcessContext,
    RunRecord,
)

DRAIN_SECONDS = 2.0
"""How long output of a finished container is still read (a stray process may hold
the pipe open)."""
REPORT_BYTES = 1024
"""The most of a failed pre-exec step's error message kept for the status."""
SIGNAL_KILL = signal.SIGUSR1
"""Sent by vkpy to the supervisor: SIGKILL everything of the container now."""
PR_SET_CHILD_SUBREAPER = 36
RUNTIME_TIMEOUT = 60.0
"""The longest `runc start` may take."""


def _become_subreaper() -> None:
    """Orphans below (the container's init once `runc run --detach` exits) become ours."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER)")


def _runtime_error(log_path: str, fallback: str) -> str:
    """The runtime's last error in its JSON log (`--log-format json`), else `fallback`."""
    message = ""
    with contextlib.suppress(OSError), open(log_path, errors="replace") as log:
        for line in log:
            with contextlib.suppress(ValueError):
                entry = json.loads(line)
                if isinstance(entry, dict) and entry.get("level") in ("error", "fatal"):
                    message = str(entry.get("msg", ""))
    return message[:REPORT_BYTES] or fallback


def _cannot_run_message(error: BaseException, argv: tuple[str, ...], cwd: str) -> str:
    if isinstance(error, FileNotFoundError):
        if error.filename == cwd:
            return f"working directory {cwd!r} does not exist"
        return f'exec: "{argv[0]}": executable file not found in $PATH'
    if isinstance(error, PermissionError):
        return f'exec: "{argv[0]}": permission denied'
    if isinstance(error, OSError):
        return f'exec: "{argv[0]}": {error.strerror}'
    return f"could not enter the container's context: {error}"


def _entering(
    report_fd: int,
    context: ProcessContext,
    cgroup: Path | None,
    tty: bool,
) -> None:
    """The pre-exec step (enter_ids) in the new process. subprocess reports only that a
    pre-exec function failed, so what failed is written to `report_fd` first, for the
    container's status message."""
    try:
        enter_ids(context, cgroup, tty)
    except BaseException as error:
        with contextlib.suppress(OSError):
            os.write(report_fd, str(error).encode(errors="replace")[:REPORT_BYTES])
        raise


def _entering_failure(report_fd: int) -> str:
    """What `_entering` wrote before it failed ("" when nothing was written)."""
    os.set_blocking(report_fd, False)
    try:
        return os.read(report_fd, REPORT_BYTES).decode(errors="replace").strip()
    except BlockingIOError:
        return ""


def _mebibytes(value: int) -> str:
    return f"{value / 2**20:.0f}Mi"


class Supervisor:
    def __init__(self, spec: LaunchSpec, notify_fd: int) -> None:
        self.spec = spec
        self.instance = InstanceDir(Path(spec.instance_dir), 0)
        self.notify_fd = notify_fd
        self.pending: list[int] = []
        self.child: subprocess.Popen[bytes] | None = None
        self.output_readers: tuple[int, ...] = ()
        self.output_writers: tuple[int, ...] = ()
        self.leader: int | None = None
        """The container's main process when it is not `child` (detached runs)."""
        self.cgroup: Path | None = None
        self.oom_base = 0
        self.watchdog_oom: str | None = None
        self.exited = False
        self.terminal = -1
        """The pseudo-terminal's master side (tty containers)."""
        self.tty_name: str | None = None
        self.tty_input: int | None = None
        """The stdin FIFO, copied into the terminal (tty containers with stdin)."""
        self.once_input: int | None = None
        """The stdin FIFO, read-only (`stdin_once`): copied into `once_output`."""
        self.once_output: int | None = None
        """The write end of the process's stdin pipe (`stdin_once`)."""
        self.once_pending = b""
        """Input read from the FIFO that the process has not taken yet."""
        self.once_ended = False
        """The first attach session's writer went away: close stdin once it is written."""

    # --- signals ---------------------------------------------------------------------

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self.pending.append(signum)

    def _install_signals(self) -> int:
        read_fd, write_fd = os.pipe()
        os.set_blocking(read_fd, False)
        os.set_blocking(write_fd, False)
        signal.set_wakeup_fd(write_fd)
        for sig in (signal.SIGTERM, SIGNAL_KILL, signal.SIGCHLD):
            signal.signal(sig, self._on_signal)
        for sig in (signal.SIGINT, signal.SIGHUP, signal.SIGPIPE):
            signal.signal(sig, signal.SIG_IGN)
        return read_fd

    def _handle_signals(self) -> None:
        while self.pending:
            signum = self.pending.pop(0)
            if signum == signal.SIGTERM:
                self._signal_group(signal.SIGTERM)
            elif signum == SIGNAL_KILL:
                self._kill_everything()

    def _signal_group(self, sig: int) -> None:
        """Signal the process group (only while the leader is unreaped: no pid reuse);
        a detached container's init (its PID namespace holds the rest)."""
        if self.child is None or self.exited:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            if self.leader is not None:
                os.kill(self.leader, sig)
            else:
                os.killpg(self.child.pid, sig)

    def _kill_everything(self, through_runtime: bool = True) -> None:
        if self.child is None:
            return
        if self.spec.kill_argv and through_runtime and not self.exited:
            # The container's processes are runc's (runtime: oci): killed through it.
            with contextlib.suppress(OSError, subprocess.SubprocessError):
                subprocess.run(
                    self.spec.kill_argv,
                    check=False,
                    stdin=subprocess.DEVNULL,
                    capture_output=True,
                    timeout=10,
                )
        self._signal_group(signal.SIGKILL)
        if self.leader is not None:
            return  # runc's: its kill and delete reach every process of the container
        for member in proc.session_members(self.child.pid):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(member.pid, signal.SIGKILL)
        if self.cgroup is not None:
            cgroups.kill_all(self.cgroup)

    # --- the run -----------------------------------------------------------------------

    def _notify(self, report: dict[str, object]) -> None:
        if self.notify_fd < 0:
            return
        with contextlib.suppress(OSError):
            os.write(self.notify_fd, json.dumps(report).encode() + b"\n")
            os.close(self.notify_fd)
        self.notify_fd = -1

    def _make_cgroup(self) -> None:
        spec = self.spec
        if spec.memory_mode != "cgroup" or not spec.cgroup_parent:
            return
        try:
            self.cgroup = cgroups.create(
                Path(spec.cgroup_parent), spec.cgroup_name, spec.memory_limit
            )
            self.oom_base = cgroups.oom_kills(self.cgroup)
        except OSError as error:
            print(f"cannot make cgroup: {error}", file=sys.stderr)
            self.cgroup = None

    def _open_fifo(self, flags: int) -> int:
        """A new FIFO `STDIN_FIFO` in the instance directory (`kubectl attach` writes
        to it), opened here with `flags`."""
        path = self.instance.path / STDIN_FIFO
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
        os.mkfifo(path, 0o600)
        return os.open(path, flags)

    def _stdin_fifo(self) -> int:
        """The process's stdin for `kubectl attach`: the FIFO, held open read-write
        here, so the process never reads its end (a container runtime keeps stdin
        open too) and vkpy can write to it whenever someone attaches."""
        return self._open_fifo(os.O_RDWR)

    def _owned_output_pipes(self, owner: int) -> tuple[int, int]:
        """The container's stdout and stderr pipes, given to `owner` (both ends share
        the pipe's inode) before the container can reopen them; their write ends."""
        out_read, out_write = os.pipe()
        err_read, err_write = os.pipe()
        for fd in (out_write, err_write):
            os.fchown(fd, owner, owner)
        self.output_readers = (out_read, err_read)
        self.output_writers = (out_write, err_write)
        return out_write, err_write

    def _stdin_once_pipe(self) -> int:
        """The process's stdin for `stdin_once`: a pipe fed from the FIFO, which is held
        read-only here, so the FIFO reports the end of its first writer (Linux reports
        no hang-up on a FIFO before a writer ever opened it). Returns the read end."""
        self.once_input = self._open_fifo(os.O_RDONLY | os.O_NONBLOCK)
        read_end, self.once_output = os.pipe()
        os.set_blocking(self.once_output, False)
        return read_end

    def _terminal(self) -> tuple[int, int, str]:
        """A new pseudo-terminal (master, slave, device) owned by the container's user."""
        master, slave = os.openpty()
        fcntl.ioctl(master, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
        uid = self.spec.context.uid
        if uid is not None and os.geteuid() == 0:
            os.fchown(slave, uid, -1)
        return master, slave, os.ttyname(slave)

    def _start_detached(self) -> str | None:
        """After `runc run --detach` (the child) exited: the container's pid. None once
        it runs; else why it cannot (and runc's container is deleted). A runc that does
        not finish within RUNTIME_TIMEOUT is killed: the supervisor must go on to answer
        vkpy's signals and record the run."""
        assert self.child is not None
        spec = self.spec
        message: str | None = None
        try:
            code = self.child.wait(timeout=RUNTIME_TIMEOUT)
        except subprocess.TimeoutExpired:
            self.child.kill()
            self.child.wait()
            code = None
            message = f"runc did not start the container within {RUNTIME_TIMEOUT:.0f} s"
        if code is not None and code != 0:
            message = _runtime_error(spec.runtime_log, f"runc exited with {code}")
        elif code == 0:
            try:
                with open(spec.pid_file) as pid_file:
                    self.leader = int(pid_file.read().strip())
                return None
            except (OSError, ValueError) as error:
                message = f"cannot start the container: {error}"
        if message is not None:
            self.leader = None
            self._run_quietly(spec.delete_argv)
        return message

    def _run_quietly(self, argv: tuple[str, ...]) -> None:
        if argv:
            with contextlib.suppress(OSError, subprocess.SubprocessError):
                subprocess.run(
                    argv,
                    check=False,
                    stdin=subprocess.DEVNULL,
                    capture_output=True,
                    timeout=30,
                )

    def _cannot_run(self, message: str, started_ns: int) -> int:
        record = ExitRecord(
            exit_code=EXIT_CANNOT_RUN,
            finished_ns=time.time_ns(),
            reason="ContainerCannotRun",
            message=message,
            started_ns=started_ns,
        )
        write_json(self.instance.exit, record.to_dict())
        self._notify({"ok": False, "message": message})
        if self.cgroup is not None:
            cgroups.remove(self.cgroup)
        return 0

    def run(self) -> int:
        wake = self._install_signals()
        spec = self.spec
        if spec.pid_file:
            _become_subreaper()
        self._make_cgroup()
        started_ns = time.time_ns()
        context = spec.context
        env = dict(context.env)
        report_read = report_write = -1
        try:
            if spec.stdin_pipe and spec.stdin_once and not spec.tty:
                stdin = self._stdin_once_pipe()
            elif spec.stdin_pipe:
                stdin = self._stdin_fifo()
            else:
                stdin = subprocess.DEVNULL
            if spec.tty:
                self.terminal, slave, self.tty_name = self._terminal()
                self.tty_input = stdin if isinstance(stdin, int) and stdin >= 0 else None
                env.setdefault("TERM", "xterm")
                streams = (slave, slave, slave)
            elif spec.output_owner is not None:
                streams = (stdin, *self._owned_output_pipes(spec.output_owner))
            else:
                streams = (stdin, subprocess.PIPE, subprocess.PIPE)
            enter_pid_namespace(context.pid_namespace)  # the child starts there
            report_read, report_write = os.pipe()  # close-on-exec: gone once it runs
            self.child = subprocess.Popen(
                spec.argv,
                stdin=streams[0],
                stdout=streams[1],
                stderr=streams[2],
                cwd=context.cwd,
                env=env,
                umask=context.umask,
                start_new_session=True,
                # The supervisor has a single thread, so a pre-exec function is safe.
                preexec_fn=functools.partial(  # noqa: PLW1509
                    _entering, report_write, context, self.cgroup, spec.tty
                ),
            )
            if spec.tty:
                os.close(slave)
            for fd in self.output_writers:
                os.close(fd)
            if self.once_output is not None and isinstance(stdin, int):
                os.close(stdin)  # the process's end of its stdin pipe
        except (OSError, subprocess.SubprocessError) as error:
            message = _cannot_run_message(error, spec.argv, context.cwd)
            if report_read >= 0 and isinstance(error, subprocess.SubprocessError):
                why = _entering_failure(report_read)
                message = f"could not enter the container's context: {why}" if why else message
            return self._cannot_run(message, started_ns)
        finally:
            for fd in (report_read, report_write):
                if fd >= 0:
                    os.close(fd)
        if spec.pid_file:
            failure = self._start_detached()
            if failure is not None:
                return self._cannot_run(failure, started_ns)
        me = os.getpid()
        leader = self._leader_pid()
        run = RunRecord(
            supervisor_pid=me,
            supervisor_start=proc.start_ticks(me) or 0,
            pid=leader,
            pid_start=proc.start_ticks(leader) or 0,
            started_ns=started_ns,
            cgroup=str(self.cgroup) if self.cgroup else (spec.runtime_cgroup or None),
            tty=self.tty_name,
        )
        write_json(self.instance.run, run.to_dict())
        self._notify({"ok": True, "run": run.to_dict()})
        status = self._pump(wake)
        oom = self.watchdog_oom is not None or (
            self.cgroup is not None and cgroups.oom_kills(self.cgroup) > self.oom_base
        )
        if spec.runtime_cgroup and not oom:
            # runtime: oci: runc's cgroup of the container, new for this run.
            oom = cgroups.oom_kills(Path(spec.runtime_cgroup)) > 0
        self._run_quietly(spec.delete_argv)
        record = ExitRecord.from_status(
            status, oom=oom, started_ns=started_ns, pid=run.pid, message=self.watchdog_oom
        )
        write_json(self.instance.exit, record.to_dict())
        if self.cgroup is not None:
            cgroups.remove(self.cgroup)
        return 0

    def _pump(self, wake: int) -> int:
        """Copy output to the log until the process ended and its pipes are drained."""
        assert self.child is not None
        spec = self.spec
        writer = LogWriter(self.instance.log, spec.log_max_bytes, spec.log_max_files)
        selector = selectors.DefaultSelector()
        if self.terminal >= 0:
            outputs = [(self.terminal, "stdout")]
            if self.tty_input is not None:
                os.set_blocking(self.tty_input, False)
                selector.register(self.tty_input, selectors.EVENT_READ, "input")
        elif self.output_readers:
            outputs = list(zip(self.output_readers, ("stdout", "stderr"), strict=True))
        else:
            assert self.child.stdout and self.child.stderr
            outputs = [
                (self.child.stdout.fileno(), "stdout"),
                (self.child.stderr.fileno(), "stderr"),
            ]
        for fd, stream in outputs:
            os.set_blocking(fd, False)
            selector.register(fd, selectors.EVENT_READ, stream)
        if self.once_input is not None:
            selector.register(self.once_input, selectors.EVENT_READ, "once-in")
        selector.register(wake, selectors.EVENT_READ, None)
        watchdog = spec.memory_mode == "watchdog" and spec.memory_limit is not None
        next_check = time.monotonic()
        status: int | None = None
        drain_until = 0.0
        open_pipes = len(outputs)
        while True:
            now = time.monotonic()
            if status is not None:
                if open_pipes == 0 or now >= drain_until:
                    break
                timeout: float = drain_until - now
            elif watchdog:
                timeout = max(0.0, next_check - now)
            else:
                timeout = 1.0
            for key, _ in selector.select(timeout):
                if key.data is None:
                    with contextlib.suppress(BlockingIOError):
                        os.read(wake, 512)
                    continue
                if key.data == "input":
                    self._copy_input(key.fd, selector)
                    continue
                if key.data == "once-in":
                    self._read_once_input(selector)
                    continue
                if key.data == "once-out":
                    self._write_once_input(selector)
                    continue
                try:
                    data = os.read(key.fd, 65536)
                except BlockingIOError:
                    continue
                except OSError:  # EIO: the terminal's last user is gone
                    data = b""
                if data:
                    writer.write(str(key.data), data)
                else:
                    selector.unregister(key.fd)
                    open_pipes -= 1
            self._handle_signals()
            if status is None and self._leader_exited():
                self._kill_everything(through_runtime=False)
                _, status = os.waitpid(self._leader_pid(), 0)
                self.exited = True
                self.child.returncode = -1
                drain_until = time.monotonic() + DRAIN_SECONDS
            if status is None and watchdog and time.monotonic() >= next_check:
                self._watch_memory()
                next_check = time.monotonic() + spec.watchdog_interval
        writer.close()
        selector.close()
        for end in (self.once_input, self.once_output):
            if end is not None:
                with contextlib.suppress(OSError):
                    os.close(end)
        self.once_input = self.once_output = None
        return status

    def _read_once_input(self, selector: selectors.BaseSelector) -> None:
        """FIFO → pending input; the end of the first writer ends the process's stdin."""
        assert self.once_input is not None
        try:
            data = os.read(self.once_input, 65536)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if data:
            self.once_pending += data
        else:
            self.once_ended = True
        selector.unregister(self.once_input)
        if self.once_ended:
            os.close(self.once_input)  # later writers find no reader: no second session
            self.once_input = None
        self._write_once_input(selector, registered=False)

    def _write_once_input(self, selector: selectors.BaseSelector, registered: bool = True) -> None:
        """Pending input → the process's stdin pipe, as much as it takes; while it takes
        no more, the FIFO is not read (the writer waits, as on a full pipe)."""
        assert self.once_output is not None
        try:
            written = os.write(self.once_output, self.once_pending) if self.once_pending else 0
        except BlockingIOError:
            written = 0
        except OSError:  # the process closed its stdin: what is left goes nowhere
            written = len(self.once_pending)
        self.once_pending = self.once_pending[written:]
        if self.once_pending:
            if not registered:
                selector.register(self.once_output, selectors.EVENT_WRITE, "once-out")
            return
        if registered:
            selector.unregister(self.once_output)
        if self.once_ended:
            os.close(self.once_output)
            self.once_output = None
        elif self.once_input is not None:
            selector.register(self.once_input, selectors.EVENT_READ, "once-in")

    def _copy_input(self, fd: int, selector: selectors.BaseSelector) -> None:
        """What `kubectl attach` wrote into the stdin FIFO goes into the terminal."""
        try:
            data = os.read(fd, 65536)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            selector.unregister(fd)
            return
        with contextlib.suppress(OSError):
            view = memoryview(data)
            while view:
                view = view[os.write(self.terminal, view) :]

    def _leader_exited(self) -> bool:
        """Whether the main process ended, without reaping it (so its pid, which names
        the process group, cannot be reused while the rest is killed)."""
        try:
            result = os.waitid(os.P_PID, self._leader_pid(), os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            return True
        return result is not None

    def _leader_pid(self) -> int:
        """The container's main process: the child, or a detached run's init."""
        assert self.child is not None
        return self.leader if self.leader is not None else self.child.pid

    def _watch_memory(self) -> None:
        assert self.child is not None and self.spec.memory_limit is not None
        members = proc.session_members(self.child.pid)
        used = proc.rss_bytes(members)
        if used > self.spec.memory_limit:
            self.watchdog_oom = (
                f"memory use {_mebibytes(used)} over the limit "
                f"{_mebibytes(self.spec.memory_limit)}: killed by the vkpy watchdog"
            )
            self._kill_everything()


def _detach(log_path: Path) -> None:
    """Leave vkpy's session and pipes: stdin from /dev/null, output to our own log."""
    os.setsid()
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    log = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(log)


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python -m vkpy.providers.process.supervisor <spec.json>", file=sys.stderr)
        return 2
    raw = read_json(Path(argv[1]))
    if raw is None:
        print(f"cannot read {argv[1]}", file=sys.stderr)
        return 2
    spec = LaunchSpec.from_dict(raw)
    read_fd, write_fd = os.pipe()
    if os.fork() > 0:
        os.close(write_fd)
        chunks = []
        while chunk := os.read(read_fd, 65536):
            chunks.append(chunk)
        report = b"".join(chunks)
        os.write(1, report or b'{"ok": false, "message": "the supervisor failed to start"}\n')
        return 0
    os.close(read_fd)
    _detach(InstanceDir(Path(spec.instance_dir), 0).supervisor_log)
    try:
        return Supervisor(spec, write_fd).run()
    except BaseException:
        traceback.print_exc()
        return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
