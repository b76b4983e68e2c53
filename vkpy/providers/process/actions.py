"""Probe and lifecycle hook handlers: exec, httpGet, tcpSocket, grpc and sleep.

Probes and hooks share their handlers in the pod spec, so they share this code. An
exec handler runs in the container's context (its cgroup, user, environment and
working directory) through the exec helper (enter.py), in a session of its own so a
timeout kills everything it started. httpGet, tcpSocket and grpc go to the pod's address
(`host`: its own with `network: pod`, else the node's) unless the handler names a host; named
ports are looked up in the container's ports. HTTP probes follow the kubelet:
no keep-alive, `User-Agent: kube-probe/<version>`, success for 200-399, no TLS
verification for HTTPS; a redirect to the same host is followed (at most 10), one to
another host is not: the probe then succeeds with a warning holding the response's
body (the kubelet's `ProbeWarning` Event).
gRPC probes call the standard health service (grpc_probe.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from dataclasses import dataclass
from urllib.parse import urljoin, urlsplit

import aiohttp

from vkpy.core.objects import KubeObject
from vkpy.providers.process import grpc_probe
from vkpy.providers.process.layout import InstanceDir
from vkpy.providers.process.supervision import helper_argv, helper_env

MAX_REDIRECTS = 10
"""Redirects to the same host an HTTP probe follows (Go's http.Client default)."""
OUTPUT_LIMIT = 10 * 1024
"""Bytes of an exec handler's output kept for the message (the kubelet keeps 10 KiB);
the rest is read and dropped as it arrives (see `read_capped`)."""
READ_CHUNK = 64 * 1024
USER_AGENT = "kube-probe/1.36"


@dataclass(frozen=True)
class Outcome:
    ok: bool
    message: str = ""
    warning: str = ""
    """A success the kubelet warns about (an HTTP redirect to another host)."""


def resolve_port(value: object, container: KubeObject) -> int | None:
    """A handler's port: a number, or the name of one of the container's ports."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    text = str(value or "")
    if text.isdigit():
        return int(text)
    for port in container.get("ports") or []:
        if port.get("name") == text:
            return int(port.get("containerPort", 0)) or None
    return None


def _kill_session(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


async def read_capped(stream: asyncio.StreamReader, limit: int = OUTPUT_LIMIT) -> bytes:
    """The first `limit` bytes of `stream`, read to its end: the rest is read and
    dropped as it comes, so a command printing without end costs no memory."""
    kept = bytearray()
    while chunk := await stream.read(READ_CHUNK):
        if len(kept) < limit:
            kept += chunk[: limit - len(kept)]
    return bytes(kept)


async def _capped_output(process: asyncio.subprocess.Process) -> bytes:
    """The command's (capped) output once it ended and its output is closed."""
    assert process.stdout is not None
    out = await read_capped(process.stdout)
    await process.wait()
    return out


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


class Actions:
    """Runs handlers for the containers of one node."""

    def __init__(self, python: str, pod_host: str) -> None:
        self._python = python
        self._pod_host = pod_host
        self._session: aiohttp.ClientSession | None = None

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def run(
        self,
        handler: KubeObject,
        container: KubeObject,
        instance: InstanceDir,
        timeout: float,
        host: str | None = None,
    ) -> Outcome:
        """Run the handler once, against the pod's address `host` (default: the node's);
        exceptions become failed outcomes."""
        pod_host = host or self._pod_host
        try:
            if "exec" in handler:
                command = [str(c) for c in (handler["exec"] or {}).get("command") or []]
                return await self.exec(command, instance, timeout)
            if "httpGet" in handler:
                return await self.http_get(handler["httpGet"] or {}, container, timeout, pod_host)
            if "tcpSocket" in handler:
                tcp = handler["tcpSocket"] or {}
                return await self.tcp_socket(tcp, container, timeout, pod_host)
            if "grpc" in handler:
                grpc = handler["grpc"] or {}
                result = await grpc_probe.check(
                    pod_host,
                    int(grpc.get("port", 0)),
                    str(grpc.get("service") or ""),
                    timeout,
                    USER_AGENT,
                )
                return Outcome(result.ok, result.message)
            if "sleep" in handler:
                seconds = float((handler["sleep"] or {}).get("seconds", 0))
                await asyncio.sleep(min(seconds, timeout))
                return Outcome(True)
        except (OSError, aiohttp.ClientError, TimeoutError, ValueError) as error:
            return Outcome(False, str(error) or type(error).__name__)
        return Outcome(False, "no handler")

    async def exec(self, command: list[str], instance: InstanceDir, timeout: float) -> Outcome:
        if not command:
            return Outcome(False, "exec handler without command")
        process = await asyncio.create_subprocess_exec(
            *helper_argv(self._python, "enter"),
            str(instance.path),
            *command,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            env=helper_env(),
            start_new_session=True,
        )
        try:
            async with asyncio.timeout(timeout):
                out = await _capped_output(process)
        except TimeoutError:
            _kill_session(process.pid)
            await process.wait()
            return Outcome(False, f"command timed out after {timeout:g}s")
        except asyncio.CancelledError:
            _kill_session(process.pid)
            raise
        text = out.decode(errors="replace")
        if process.returncode == 0:
            return Outcome(True, text)
        return Outcome(False, text or f"command exited with {process.returncode}")

    def _session_for(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(force_close=True, ssl=False)
            )
        return self._session

    async def http_get(
        self, get: KubeObject, container: KubeObject, timeout: float, pod_host: str
    ) -> Outcome:
        port = resolve_port(get.get("port"), container)
        if port is None:
            return Outcome(False, f"port {get.get('port')!r} is not a container port")
        scheme = str(get.get("scheme") or "HTTP").lower()
        host = str(get.get("host") or pod_host)
        path = str(get.get("path") or "/")
        if not path.startswith("/"):
            path = "/" + path
        headers = {"User-Agent": USER_AGENT, "Accept": "*/*"}
        for header in get.get("httpHeaders") or []:
            headers[str(header.get("name"))] = str(header.get("value", ""))
        url = f"{scheme}://{_url_host(host)}:{port}{path}"
        deadline = asyncio.get_running_loop().time() + timeout
        for _ in range(MAX_REDIRECTS + 1):
            left = max(deadline - asyncio.get_running_loop().time(), 0.001)
            async with self._session_for().get(
                url,
                headers=headers,
                allow_redirects=False,
                timeout=aiohttp.ClientTimeout(total=left),
            ) as response:
                body = (await response.content.read(OUTPUT_LIMIT)).decode(errors="replace")
                location = response.headers.get("Location")
                if not (300 <= response.status < 400 and location):
                    if 200 <= response.status < 400:
                        return Outcome(True)
                    return Outcome(
                        False, f"HTTP probe failed with statuscode: {response.status} {body}"
                    )
            target = urljoin(url, location)
            if urlsplit(target).hostname != urlsplit(url).hostname:
                return Outcome(True, warning=f"Probe terminated redirects, Response body: {body}")
            url = target
        return Outcome(False, f"Get {url!r}: stopped after {MAX_REDIRECTS} redirects")

    async def tcp_socket(
        self, tcp: KubeObject, container: KubeObject, timeout: float, pod_host: str
    ) -> Outcome:
        port = resolve_port(tcp.get("port"), container)
        if port is None:
            return Outcome(False, f"port {tcp.get('port')!r} is not a container port")
        host = str(tcp.get("host") or pod_host)
        async with asyncio.timeout(timeout):
            _, writer = await asyncio.open_connection(host, port)
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()
        return Outcome(True)
