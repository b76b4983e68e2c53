"""Running skopeo and umoci on the node's store, one writer at a time.

containers/image reads, changes and rewrites an OCI layout's index.json without a
lock, and umoci's garbage collection deletes blobs that no index entry reaches yet
(a pull's, half-way). So every command that writes the layout holds the store's lock
exclusively and every reader holds it shared, through util-linux `flock(1)`: the
lock then also covers `python -m vkpy images import` run beside a running vkpy, and
waiting for it never blocks the event loop. Pulls are serialised as a result, which
is the kubelet's default (`serializeImagePulls: true`).
"""

from __future__ import annotations

import asyncio
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from vkpy.oci.images.errors import ImageToolError

_LOGRUS_MSG = re.compile(r'msg="((?:[^"\\]|\\.)*)"')


@dataclass(frozen=True)
class Tools:
    """Where the programs are (their names on PATH by default)."""

    skopeo: str = "skopeo"
    umoci: str = "umoci"


@dataclass(frozen=True)
class ToolResult:
    returncode: int
    stdout: bytes
    stderr: str

    def last_error(self) -> str:
        """The last non-empty line of stderr: skopeo's and umoci's final message."""
        lines = [line.strip() for line in self.stderr.splitlines() if line.strip()]
        if not lines:
            return f"exit status {self.returncode}"
        logged = _LOGRUS_MSG.search(lines[-1])  # time="..." level=fatal msg="..."
        return logged.group(1).replace('\\"', '"') if logged else lines[-1]


async def run(
    argv: Sequence[str],
    *,
    lock: Path | None = None,
    shared: bool = False,
    env: Mapping[str, str] | None = None,
    timeout: float | None = None,
) -> ToolResult:
    """Run `argv` (under `lock` when given); ImageToolError only if it cannot start."""
    command = list(argv)
    if lock is not None:
        mode = "--shared" if shared else "--exclusive"
        command = ["flock", "--no-fork", mode, str(lock), *command]  # a kill reaches the tool
    try:
        process = await asyncio.create_subprocess_exec(
            *command,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=dict(env) if env is not None else None,
        )
    except OSError as error:
        raise ImageToolError(f"cannot run {command[0]}: {error.strerror}") from error
    try:
        async with asyncio.timeout(timeout):
            stdout, stderr = await process.communicate()
    except TimeoutError:
        process.kill()
        await process.wait()
        raise ImageToolError(f"{argv[0]} took longer than {timeout:g} s") from None
    except asyncio.CancelledError:
        if process.returncode is None:
            process.kill()
            await process.wait()
        raise
    return ToolResult(process.returncode or 0, stdout, stderr.decode(errors="replace"))


def isolated_env(home: Path) -> dict[str, str]:
    """An environment in which skopeo reads no user's or Docker's credentials or
    registry settings: only what the caller passes on its command line."""
    for sub in ("", ".docker", ".config", "run"):
        (home / sub).mkdir(mode=0o700, parents=True, exist_ok=True)
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "DOCKER_CONFIG": str(home / ".docker"),
        "XDG_CONFIG_HOME": str(home / ".config"),
        "XDG_RUNTIME_DIR": str(home / "run"),
    }
    for passed in (
        "http_proxy",
        "https_proxy",
        "no_proxy",
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "NO_PROXY",
    ):
        if passed in os.environ:
            env[passed] = os.environ[passed]
    return env
