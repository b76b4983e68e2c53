"""`nc` of the busybox and agnhost stand-ins: what those images' netcat does for pods.

Pods written for busybox or agnhost pipe into `nc` (Kubernetes' own node-to-pod UDP
check runs `echo hostName | nc -w 1 -u <pod-ip> 8081` and reads the reply); a host
often has no netcat at all. This one does the usual client and listener forms:

    nc [-u] [-v] [-z] [-w SECONDS] HOST PORT
    nc -l [-u] [-v] [-w SECONDS] [-p] PORT

Standard input goes to the peer (over UDP, each read as one datagram) and what the
peer sends goes to standard output. It ends when the peer closes (TCP), or, once
standard input has ended, after `-w` seconds without data (without `-w`, UDP waits
for ever, as busybox's does). `-z` only checks that a TCP port accepts connections.
Standard library only; run as `python3 -I -S netcat.py`.
"""

from __future__ import annotations

import argparse
import os
import selectors
import socket
import sys

CHUNK = 65536


def _options(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="nc", add_help=False)
    parser.add_argument("-u", dest="udp", action="store_true")
    parser.add_argument("-l", dest="listen", action="store_true")
    parser.add_argument("-v", dest="verbose", action="store_true")
    parser.add_argument("-z", dest="scan", action="store_true")
    parser.add_argument("-n", dest="numeric", action="store_true")
    parser.add_argument("-w", dest="wait", type=float)
    parser.add_argument("-p", dest="port")
    parser.add_argument("where", nargs="*")
    options = parser.parse_args(argv)
    if options.listen:
        port = options.port or (options.where[-1] if options.where else None)
        if port is None:
            parser.error("-l needs a port")
        options.host, options.port = "", int(port)
    elif len(options.where) == 2:
        options.host, options.port = options.where[0], int(options.where[1])
    else:
        parser.error("usage: nc [-u] [-v] [-z] [-w SECONDS] HOST PORT | nc -l [-u] [-p] PORT")
    return options


def _say(options: argparse.Namespace, text: str) -> None:
    if options.verbose:
        print(f"nc: {text}", file=sys.stderr, flush=True)


def _connect(options: argparse.Namespace) -> socket.socket:
    kind = socket.SOCK_DGRAM if options.udp else socket.SOCK_STREAM
    family, _, _, _, address = socket.getaddrinfo(options.host, options.port, type=kind)[0]
    sock = socket.socket(family, kind)
    sock.settimeout(options.wait)
    sock.connect(address)
    sock.settimeout(None)
    _say(options, f"connected to {options.host} {options.port}")
    return sock


def _listen(options: argparse.Namespace) -> tuple[socket.socket, bool]:
    """The socket to talk on, and whether its peer is still to be learnt (UDP)."""
    kind = socket.SOCK_DGRAM if options.udp else socket.SOCK_STREAM
    sock = socket.socket(socket.AF_INET6, kind)
    sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("::", options.port))
    _say(options, f"listening on {options.port}")
    if options.udp:
        return sock, True
    sock.listen(1)
    conn, peer = sock.accept()
    sock.close()
    _say(options, f"connection from {peer[0]} {peer[1]}")
    return conn, False


def _pump(options: argparse.Namespace, sock: socket.socket, learn_peer: bool) -> int:
    """Copy standard input to `sock` and `sock` to standard output until done."""
    selector = selectors.DefaultSelector()
    stdin = sys.stdin.fileno()
    selector.register(sock, selectors.EVENT_READ)
    peer = None
    input_open = True
    try:
        selector.register(stdin, selectors.EVENT_READ)
    except PermissionError:  # a regular file (or /dev/null): it is all there, send it
        input_open = False
        data = sys.stdin.buffer.read()
        if data and not learn_peer:
            sock.sendall(data)
        if not options.udp:
            sock.shutdown(socket.SHUT_WR)
    while True:
        timeout = None if input_open or options.wait is None else options.wait
        ready = selector.select(timeout)
        if not ready:
            return 0  # -w seconds without data after the input ended
        for key, _ in ready:
            if key.fileobj is sock:
                data, sender = sock.recvfrom(CHUNK)
                if not data and not options.udp:
                    return 0  # the peer closed
                if learn_peer and peer is None:
                    peer = sender
                os.write(sys.stdout.fileno(), data)
                continue
            data = os.read(stdin, CHUNK)
            if not data:  # the input ended
                input_open = False
                selector.unregister(stdin)
                if not options.udp:
                    sock.shutdown(socket.SHUT_WR)
            elif learn_peer:
                if peer is not None:
                    sock.sendto(data, peer)
            else:
                sock.sendall(data)


def main(argv: list[str]) -> int:
    options = _options(argv)
    try:
        if options.listen:
            sock, learn_peer = _listen(options)
        else:
            sock, learn_peer = _connect(options), False
        if options.scan:
            sock.close()
            return 0
        with sock:
            return _pump(options, sock, learn_peer)
    except OSError as error:
        print(f"nc: {error.strerror or error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
