"""What `kubectl exec` becomes under ECS Exec, and what comes back: a small shell wrapper.

ECS runs every ExecuteCommand as an *interactive* Session Manager session: the
command gets a pseudo-terminal, stdout and stderr share it, the terminal cooks
what is typed, and neither stdin's end nor the command's exit status travels on the
channel. `kubectl exec` without `-t` expects none of that, so the command is
wrapped in `/bin/sh -c` (the image needs a POSIX `sh`; without `-t`, also `stty`,
`sed` and `base64`) that:

- puts the terminal in raw mode without echo when there is no `-t` (the output
  arrives byte for byte, no `\\r` added), then prints a *ready* marker; input is sent
  only after it (nothing is echoed or cooked);
- with `-i` and no `-t`, reads stdin as base64 lines up to a line holding `.`
  (stdin's end, which a terminal cannot carry) and decodes it into the command;
- prints an *exit* marker with the command's status as soon as it ends (with `-i`,
  even while the stdin decoder still waits for input: vkpy then ends the session).

The markers (`ESC`-free: they start and end with the RS control character 0x1e) are
taken out of the output by `OutputFilter`. A command whose own output contains
such a marker could fool it; stderr stays merged into stdout.
"""

from __future__ import annotations

import base64
import re
import shlex
from collections.abc import Sequence

READY = b"\x1evkpy-ready\x1e"
_EXIT_PREFIX = b"\x1evkpy-exit:"
_EXIT = re.compile(rb"\x1evkpy-exit:(\d{1,3})\x1e")
_MARK = 0x1E
STDIN_LINE = 3072
"""Bytes of stdin per base64 line."""

_READY_SH = "printf '\\036vkpy-ready\\036'"
_EXIT_SH = 's=$?; printf \'\\036vkpy-exit:%d\\036\' "$s"; exit "$s"'


def command_line(argv: Sequence[str], *, stdin: bool, tty: bool) -> str:
    """The ExecuteCommand `command` for `argv` (split by the agent like a shell would)."""
    if not argv:
        raise ValueError("no command to run")
    if tty:
        script = f'{_READY_SH}; "$@"; {_EXIT_SH}'
    elif stdin:
        script = (
            f"stty raw -echo 2>/dev/null; {_READY_SH}; "
            f"sed -n '/^\\.$/q;p' | base64 -d | {{ \"$@\"; {_EXIT_SH}; }}"
        )
    else:
        script = f'stty raw -echo 2>/dev/null; {_READY_SH}; "$@" </dev/null; {_EXIT_SH}'
    return shlex.join(["/bin/sh", "-c", script, "vkpy-exec", *argv])


class StdinEncoder:
    """stdin as the base64 lines the wrapper decodes; `finish` adds the end line."""

    def __init__(self) -> None:
        self._carry = b""

    def feed(self, data: bytes) -> bytes:
        data = self._carry + data
        whole = len(data) - len(data) % 3
        self._carry = data[whole:]
        return b"".join(
            base64.b64encode(data[i : min(i + STDIN_LINE, whole)]) + b"\n"
            for i in range(0, whole, STDIN_LINE)
        )

    def finish(self) -> bytes:
        tail = base64.b64encode(self._carry) + b"\n" if self._carry else b""
        self._carry = b""
        return tail + b".\n"


class OutputFilter:
    """Takes the wrapper's markers out of the output stream; notes ready and exit."""

    def __init__(self) -> None:
        self._held = b""
        self.ready = False
        self.exit_code: int | None = None

    def feed(self, data: bytes) -> bytes:
        buffer = self._held + data
        self._held = b""
        out = bytearray()
        while buffer:
            at = buffer.find(_MARK)
            if at < 0:
                out += buffer
                break
            out += buffer[:at]
            rest = buffer[at:]
            if rest.startswith(READY):
                self.ready = True
                buffer = rest[len(READY) :]
                continue
            found = _EXIT.match(rest)
            if found:
                self.exit_code = int(found.group(1))
                buffer = rest[found.end() :]
                continue
            if _could_become_marker(rest):
                self._held = rest
                break
            out += rest[:1]
            buffer = rest[1:]
        return bytes(out)

    def flush(self) -> bytes:
        """Whatever was held back as a possible marker (at the end of the output)."""
        held, self._held = self._held, b""
        return held


def _could_become_marker(data: bytes) -> bool:
    if READY.startswith(data) or _EXIT_PREFIX.startswith(data):
        return True
    if data.startswith(_EXIT_PREFIX):
        digits = data[len(_EXIT_PREFIX) :]
        return len(digits) <= 3 and digits.isdigit()
    return False
