"""Stand-in for the nginx and httpd images: a static HTTP server on the image's port.

`python -I -S web.py --port 80 --root /usr/share/nginx/html --page nginx` serves the
files under the document root, read relative to the container's root directory (its
working directory; volumes mounted there are links to the pod's volumes), or a small
index page naming the server when the root holds nothing. One line per request goes
to stdout, as the images' access logs do. SIGTERM ends it with exit code 0. Standard
library only, nothing of vkpy.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from types import FrameType

PAGES = {
    "nginx": "<!DOCTYPE html>\n<html><head><title>Welcome to nginx!</title></head>"
    "<body><h1>Welcome to nginx!</h1></body></html>\n",
    "httpd": "<html><body><h1>It works!</h1></body></html>\n",
}


class Handler(SimpleHTTPRequestHandler):
    """Files under the document root; the index page at / when there is no index."""

    page = ""

    def send_head(self):  # type: ignore[no-untyped-def]
        path = self.translate_path(self.path)
        if self.path.split("?", 1)[0] == "/" and not any(
            os.path.exists(os.path.join(path, name)) for name in ("index.html", "index.htm")
        ):
            body = self.page.encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            return _Body(body)
        return super().send_head()

    def log_message(self, format: str, *args: object) -> None:
        sys.stdout.write(f"{self.client_address[0]} - {format % args}\n")
        sys.stdout.flush()


class _Body:
    """A readable for the generated page (what send_head returns to do_GET)."""

    def __init__(self, data: bytes) -> None:
        self.data = data

    def read(self, size: int = -1) -> bytes:
        data, self.data = self.data, b""
        return data

    def close(self) -> None:
        pass


def _stop(signum: int, frame: FrameType | None) -> None:
    sys.exit(0)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, default=80)
    parser.add_argument("--root", default="/usr/share/nginx/html")
    parser.add_argument("--page", default="nginx", choices=sorted(PAGES))
    options = parser.parse_args(argv)
    root = options.root.lstrip("/") or "."
    Handler.page = PAGES[options.page]
    signal.signal(signal.SIGTERM, _stop)
    try:
        server = ThreadingHTTPServer(("", options.port), partial(Handler, directory=root))
    except PermissionError:
        print(
            f"cannot listen on port {options.port} as uid {os.getuid()}: ports below "
            "net.ipv4.ip_unprivileged_port_start need privileges",
            file=sys.stderr,
        )
        return 1
    print(f"serving {options.root} on port {options.port}", flush=True)
    server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
