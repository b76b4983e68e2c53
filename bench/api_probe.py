"""Times one kind of kubelet API or API-server request from a process of its own.

bench/big_node.py used to time its requests on its own event loop, the one that also
ran the churn and a watch of 10,000 pods; that loop was late by up to 88 ms p99 on a
quiet machine, and every timing included it. Each series is now measured by one of
these processes (started by big_node.py), whose loop does nothing else:

- `pods`: GET /pods straight to vkpy's port (the admin's client certificate);
- `pods-curl`: the same GET by curl, a client in C with OpenSSL, as a Go client (the
  API server, a monitoring agent) reads it; timed by curl itself from the end of its
  TLS handshake, so the figure is a request on an open connection, like the others;
- `logs`: GET /containerLogs/{ns}/{pod}/app?tailLines=10 straight to vkpy;
- `apiserver-logs`: GET /api/v1/namespaces/{ns}/pods/{pod}/log?tailLines=10 to the
  API server, the request `kubectl logs` makes and waits for (the API server proxies it
  to vkpy);
- `apiserver-pod`: GET /api/v1/namespaces/{ns}/pods/{pod} to the API server, a
  request that never reaches vkpy: the API server's own time under the same churn,
  the floor under `apiserver-logs`;
- `kubectl`: `kubectl logs --tail=10`, wall time including kubectl's own start.

Each request is timed to its whole answer read, and to its response headers (for
`/pods`, whose 22 MB body the client reads with Python's TLS, the difference is the
transfer). The pod to ask about comes on stdin, one name a line (the newest wins; the parent
sends a running one as the churn goes on); end of stdin ends the run, and the times
(seconds), failures and this loop's own lateness go to stdout as one JSON object.
Requests go one after another, 0.1 s apart (kubectl: back to back). Loopback only.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp
import yaml
from kubelet_api import admin_context


async def read_names(current: list[str], done: asyncio.Event) -> None:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    while line := await reader.readline():
        current[0] = line.decode().strip() or current[0]
    done.set()


async def lateness(samples: list[float], done: asyncio.Event) -> None:
    while not done.is_set():
        began = time.perf_counter()
        await asyncio.sleep(0.05)
        samples.append(time.perf_counter() - began - 0.05)


async def curl(url: str, workdir: Path) -> tuple[float, float] | None:
    """One GET of `url` by curl: (seconds to the response headers, seconds to the whole
    body) from the end of the TLS handshake, or None when it failed."""
    process = await asyncio.create_subprocess_exec(
        "curl",
        "--silent",
        "--insecure",
        "--cert",
        str(workdir / "admin.crt"),
        "--key",
        str(workdir / "admin.key"),
        "--output",
        "/dev/null",
        "--write-out",
        "%{http_code} %{time_appconnect} %{time_starttransfer} %{time_total}",
        url,
        stdout=asyncio.subprocess.PIPE,
    )
    out, _ = await process.communicate()
    if process.returncode != 0:
        return None
    code, connected, first, total = out.decode().split()
    if code != "200":
        return None
    return float(first) - float(connected), float(total) - float(connected)


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "what", choices=["pods", "pods-curl", "logs", "apiserver-logs", "apiserver-pod", "kubectl"]
    )
    parser.add_argument("--kubelet", required=True, help="https://127.0.0.1:<port>")
    parser.add_argument("--kubeconfig", type=Path, required=True)
    parser.add_argument("--kubectl", required=True)
    parser.add_argument("--namespace", required=True)
    parser.add_argument("--workdir", type=Path, required=True)
    args = parser.parse_args()
    server = yaml.safe_load(args.kubeconfig.read_text())["clusters"][0]["cluster"]["server"]
    args.workdir.mkdir(parents=True, exist_ok=True)
    ssl = admin_context(args.kubeconfig, args.workdir)
    current = [""]
    done = asyncio.Event()
    result: dict[str, Any] = {"times": [], "headers": [], "failures": 0, "lateness": []}
    reader = asyncio.create_task(read_names(current, done))
    late = asyncio.create_task(lateness(result["lateness"], done))
    ns = args.namespace
    urls = {
        "pods": args.kubelet + "/pods",
        "logs": args.kubelet + f"/containerLogs/{ns}/{{pod}}/app?tailLines=10",
        "apiserver-logs": server + f"/api/v1/namespaces/{ns}/pods/{{pod}}/log?tailLines=10",
        "apiserver-pod": server + f"/api/v1/namespaces/{ns}/pods/{{pod}}",
    }
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=ssl)) as session:
        while not done.is_set():
            if not current[0]:
                await asyncio.sleep(0.1)
                continue
            began = time.perf_counter()
            timed: tuple[float | None, float] | None = None  # (to headers, to the end)
            if args.what == "pods-curl":
                timed = await curl(urls["pods"], args.workdir)
            elif args.what == "kubectl":
                process = await asyncio.create_subprocess_exec(
                    args.kubectl,
                    f"--kubeconfig={args.kubeconfig}",
                    "logs",
                    "-n",
                    ns,
                    current[0],
                    "--tail=10",
                    stdout=asyncio.subprocess.DEVNULL,
                    stderr=asyncio.subprocess.DEVNULL,
                )
                if await process.wait() == 0:
                    timed = (None, time.perf_counter() - began)
            else:
                async with session.get(urls[args.what].format(pod=current[0])) as response:
                    headers = time.perf_counter() - began
                    await response.read()
                if response.status == 200:
                    timed = (headers, time.perf_counter() - began)
            if timed is None:
                result["failures"] += 1
            else:
                if timed[0] is not None:
                    result["headers"].append(timed[0])
                result["times"].append(timed[1])
            if args.what != "kubectl":
                await asyncio.sleep(0.1)
    await reader
    await late
    json.dump(result, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
