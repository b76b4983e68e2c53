"""The busybox stand-in's `nc`, as pods use it (on loopback): Kubernetes' node-to-pod
UDP check pipes a word into `nc -w 1 -u IP PORT` and reads the reply; a TCP client
gets the server's answer; `-z` says whether a port is open; `-l` listens."""

from __future__ import annotations

import socket
import subprocess
import threading
import time

from vkpy.providers.process.standins import BUSYBOX_BIN

NC = f"{BUSYBOX_BIN}/nc"


def _udp_echo() -> tuple[socket.socket, int]:
    """A UDP server answering each datagram with `reply:<datagram>`."""
    server = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    server.bind(("127.0.0.1", 0))

    def serve() -> None:
        while True:
            try:
                data, peer = server.recvfrom(2048)
            except OSError:
                return
            server.sendto(b"reply:" + data, peer)

    threading.Thread(target=serve, daemon=True).start()
    return server, server.getsockname()[1]


def test_udp_client_prints_the_reply_and_ends_after_the_wait() -> None:
    server, port = _udp_echo()
    with server:
        began = time.monotonic()
        done = subprocess.run(
            [NC, "-w", "1", "-u", "127.0.0.1", str(port)],
            input=b"hostName\n",
            capture_output=True,
            timeout=20,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        assert done.stdout == b"reply:hostName\n"
        assert time.monotonic() - began < 15  # it ended on its own after -w


def test_tcp_client_sends_its_input_and_prints_the_answer() -> None:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)

    def serve() -> None:
        conn, _ = listener.accept()
        with conn:
            received = b""
            while chunk := conn.recv(1024):
                received += chunk
            conn.sendall(b"got " + received)

    threading.Thread(target=serve, daemon=True).start()
    with listener:
        port = listener.getsockname()[1]
        done = subprocess.run(
            [NC, "127.0.0.1", str(port)], input=b"abc", capture_output=True, timeout=20, check=False
        )
    assert done.returncode == 0, done.stderr
    assert done.stdout == b"got abc"


def test_port_check_says_open_or_closed() -> None:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    with listener:
        port = listener.getsockname()[1]
        opened = subprocess.run([NC, "-z", "127.0.0.1", str(port)], timeout=20, check=False)
    closed = subprocess.run(
        [NC, "-z", "-w", "1", "127.0.0.1", str(port)], capture_output=True, timeout=20, check=False
    )
    assert opened.returncode == 0
    assert closed.returncode == 1 and b"refused" in closed.stderr.lower()


def test_listener_prints_what_a_client_sends() -> None:
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()
    server = subprocess.Popen([NC, "-l", "-p", str(port)], stdout=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 15
        while True:
            try:
                client = socket.create_connection(("127.0.0.1", port), timeout=2)
                break
            except ConnectionRefusedError:
                assert time.monotonic() < deadline, "nc -l never listened"
                time.sleep(0.05)
        with client:
            client.sendall(b"hello listener")
        out, _ = server.communicate(timeout=15)
        assert out == b"hello listener"
    finally:
        server.kill()
        server.wait()
