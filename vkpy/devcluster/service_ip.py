"""The `kubernetes` Service at its ClusterIP, inside a network namespace of a run's own.

The dev cluster's API server listens on 127.0.0.1 only, and nothing routes Service
ClusterIPs (there is no kube-proxy). A pod with a network of its own (`network:
pod`) cannot reach 127.0.0.1 of the node, so a client inside it using the in-cluster
configuration (`KUBERNETES_SERVICE_HOST`/`_PORT`, or `https://kubernetes.default.svc`)
had nothing to talk to. Inside a private network namespace (netns.py: the
conformance run, the pod-network tests) `ServiceRelay` puts the Service's ClusterIP
on loopback and relays its port 443 to the API server, as kube-proxy would; the
pods' default route leads to the node, so they reach it, and the API server's
serving certificate names that address (cluster_pki.py). Nothing of the host's
network is touched: use it only inside such a namespace.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import socket
import subprocess
import sys
import threading
from types import TracebackType

from .cluster_pki import KUBERNETES_SERVICE_IP

HTTPS = 443
_CHUNK = 65536


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Copy until end of file, then pass the end on (half-close)."""
    try:
        while data := await reader.read(_CHUNK):
            writer.write(data)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()
    except OSError:
        writer.close()


class ServiceRelay:
    """`with ServiceRelay(api_port):` `address:port` (the `kubernetes` Service,
    10.0.0.1:443) relays to the API server at `127.0.0.1:api_port`, from a thread of
    its own, until the block is left."""

    def __init__(self, api_port: int, address: str = KUBERNETES_SERVICE_IP, port: int = HTTPS):
        self.address = address
        self.port = port
        self.api_port = api_port
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._stop: asyncio.Event | None = None
        self._thread: threading.Thread | None = None
        self._listener: socket.socket | None = None
        self._connections: set[asyncio.Task[None]] = set()
        """The connections being relayed. Python 3.11's stream server keeps no
        reference to its handler tasks, so one whose sockets are both idle could be
        garbage-collected mid-connection ("Task was destroyed but it is pending")."""

    def __enter__(self) -> ServiceRelay:
        subprocess.run(
            ["ip", "addr", "replace", f"{self.address}/32", "dev", "lo"], check=True
        )  # fmt: skip
        self._listener = socket.create_server((self.address, self.port))
        self._thread = threading.Thread(target=self._run, name="service-relay", daemon=True)
        self._thread.start()
        self._ready.wait(timeout=30)
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        if self._thread is not None:
            self._thread.join(timeout=30)
        if self._listener is not None:
            self._listener.close()
        self._loop.close()

    def _run(self) -> None:
        self._loop.run_until_complete(self._serve())

    async def _serve(self) -> None:
        self._stop = asyncio.Event()
        server = await asyncio.start_server(self._relay, sock=self._listener)
        self._ready.set()
        async with server:
            await self._stop.wait()
        for task in list(self._connections):
            task.cancel()
        await asyncio.gather(*self._connections, return_exceptions=True)

    async def _relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        try:
            await self._relay_connection(reader, writer)
        finally:
            self._connections.discard(task)

    async def _relay_connection(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        try:
            upstream = await asyncio.open_connection("127.0.0.1", self.api_port)
        except OSError:
            writer.close()
            return
        up_reader, up_writer = upstream
        await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))
        for end in (writer, up_writer):
            end.close()
            with contextlib.suppress(OSError):
                await end.wait_closed()


def listeners_on(address: str) -> int:
    """How many TCP sockets listen on `address` (IPv4) in this network namespace."""
    packed = socket.inet_aton(address)
    wanted = f"{int.from_bytes(packed, 'little'):08X}"
    count = 0
    with contextlib.suppress(OSError), open("/proc/net/tcp") as table:
        next(table, None)
        for line in table:
            fields = line.split()
            if len(fields) > 3 and fields[3] == "0A" and fields[1].split(":")[0] == wanted:
                count += 1
    return count


def drop_address(address: str) -> None:
    """Take `address` off loopback unless something else still listens on it (another
    dev cluster's relay shares it, each on its own port)."""
    if listeners_on(address) == 0:
        subprocess.run(
            ["ip", "addr", "del", f"{address}/32", "dev", "lo"], capture_output=True, check=False
        )  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    """`python -m vkpy.devcluster.service_ip ADDRESS PORT API_PORT`: relay until
    SIGTERM or SIGINT (the dev cluster's `api-relay` add-on, pod_network.py)."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 3:
        print("usage: python -m vkpy.devcluster.service_ip ADDRESS PORT API_PORT", file=sys.stderr)
        return 2
    address, port, api_port = args[0], int(args[1]), int(args[2])
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    with ServiceRelay(api_port, address, port):
        print(f"relaying {address}:{port} to 127.0.0.1:{api_port}", flush=True)
        stop.wait()
    drop_address(address)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
