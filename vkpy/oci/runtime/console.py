"""The pseudo-terminal of a `tty: true` container or a `kubectl exec -t`, from runc.

With `process.terminal` set, runc makes the container's pseudo-terminal inside the
container (its own devpts) and sends the master side over a Unix socket the caller
listens on (`--console-socket`), as one file descriptor in an SCM_RIGHTS message.
Whoever holds the master reads the terminal's output and writes its input: the
supervisor for a container (it logs the output as stdout and copies `kubectl attach`
input in, as it does today with a pty it makes itself), the exec stream for
`kubectl exec -t`. This module is the receiving end; Python's socket.recv_fds does
the SCM_RIGHTS part.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
from pathlib import Path
from types import TracebackType


class ConsoleError(RuntimeError):
    """runc sent no terminal (it failed before, or sent something else)."""


class ConsoleSocket:
    """A listening socket at `path` for one terminal: `async with` it around the
    runc call that gets `console_socket=path`, then `receive()` the master fd."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._sock.bind(str(path))
        os.chmod(path, 0o600)
        self._sock.listen(1)
        self._sock.setblocking(False)

    async def __aenter__(self) -> ConsoleSocket:
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.close()

    async def receive(self, timeout: float = 10.0) -> int:
        """The terminal's master side, as a file descriptor the caller owns."""
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(timeout):
                conn, _ = await loop.sock_accept(self._sock)
        except TimeoutError as error:
            raise ConsoleError(f"no terminal from runc within {timeout}s") from error
        with conn:
            conn.setblocking(True)
            conn.settimeout(timeout)
            # runc sends the terminal's name with the descriptor.
            _, fds, _, _ = await asyncio.to_thread(socket.recv_fds, conn, 4096, 1)
        if not fds:
            raise ConsoleError("runc's message held no file descriptor")
        return fds[0]

    def close(self) -> None:
        self._sock.close()
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()
