"""moto's AWS emulator for the AWS backends' tests, and a proxy that misbehaves on cue.

vkpy's AWS backends never reach AWS in tests: they talk to moto's server on
127.0.0.1. moto pins a newer botocore than aiobotocore allows, so moto runs from its
own virtualenv, made on first use under ~/.cache/vkpy (and reused), so `make test`
works on a fresh machine. Pinned: moto 5.2.5. Its Fargate RunTask builds the task's
ENI attachment with the ENI's private DNS name, which exists only when the subnet's
VPC has DNS hostnames enabled (otherwise RunTask fails with "'NetworkInterface'
object has no attribute 'private_dns_name'"); the fixtures create such a VPC. moto
also needs a container-level memory or memoryReservation (vkpy always sets one).

Between vkpy and moto sits `AwsProxy`, a small HTTP forwarder the tests control: it
answers a share of calls with ThrottlingException / TooManyRequestsException (to show
that pods still converge), counts calls, and lets a test rewrite answers for what
moto does not emulate (a function's Pending state, a container's non-zero exit code)
or answer calls moto does not have (ECS ExecuteCommand: tests/integration/ssm_endpoint.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import http.client
import io
import json
import os
import random
import subprocess
import sys
import threading
import time
import urllib.request
import zipfile
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from aiobotocore.session import get_session

from tests.integration.agent import free_port

MOTO_VERSION = "5.2.5"
MOTO_REQUIREMENT = f"moto[server]=={MOTO_VERSION}"
REGION = "us-east-1"
ACCOUNT = "123456789012"
CACHE = Path(os.environ.get("VKPY_CACHE_DIR", Path.home() / ".cache" / "vkpy"))

FAKE_AWS_ENV = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_SESSION_TOKEN": "testing",
    "AWS_DEFAULT_REGION": REGION,
    "AWS_REGION": REGION,
    "AWS_CONFIG_FILE": "/dev/null",
    "AWS_SHARED_CREDENTIALS_FILE": "/dev/null",
    "AWS_EC2_METADATA_DISABLED": "true",
}
"""Credentials and region that can only work against the emulator."""


def moto_python() -> Path:
    """The Python of moto's own virtualenv, created (once, under a lock) when missing."""
    venv = CACHE / f"moto-{MOTO_VERSION}"
    python = venv / "bin" / "python"
    stamp = venv / ".installed"
    if stamp.exists():
        return python
    CACHE.mkdir(parents=True, exist_ok=True)
    with (CACHE / f"moto-{MOTO_VERSION}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not stamp.exists():
            subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True)
            subprocess.run(
                [
                    str(python),
                    "-m",
                    "pip",
                    "install",
                    "--quiet",
                    "--disable-pip-version-check",
                    MOTO_REQUIREMENT,
                ],
                check=True,
                timeout=900,
            )
            stamp.write_text(MOTO_REQUIREMENT + "\n")
    return python


class MotoServer:
    """`moto.server` on a free port of 127.0.0.1."""

    def __init__(self, log_path: Path) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = log_path
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> MotoServer:
        python = moto_python()
        env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
        env.update(FAKE_AWS_ENV)
        log = self.log_path.open("ab")
        self.process = subprocess.Popen(
            [str(python), "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)],
            stdout=log,
            stderr=log,
            env=env,
            start_new_session=True,
        )
        deadline = time.monotonic() + 60
        while True:
            try:
                self.api("GET", "/moto-api/data.json")
                break
            except OSError:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"moto server did not start; see {self.log_path}") from None
                time.sleep(0.2)
        # Lambda without Docker: functions are "invoked" by echoing (or queued answers).
        self.api("POST", "/moto-api/config", {"lambda": {"use_docker": False}})
        # Tasks stay RUNNING until they are stopped (StopTask), as a service's would.
        self.api(
            "POST",
            "/moto-api/state-manager/set-transition",
            {"model_name": "ecs::task", "transition": {"progression": "manual", "times": 10**9}},
        )
        return self

    def api(self, method: str, path: str, body: Any = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.url + path, data=data, method=method)
        with urllib.request.urlopen(request, timeout=30) as answer:
            raw = answer.read()
        return json.loads(raw) if raw.strip().startswith((b"{", b"[")) else raw

    def queue_lambda_results(self, *results: str) -> None:
        """What the next invocations answer (moto's simple Lambda otherwise echoes)."""
        self.api(
            "POST",
            "/moto-api/static/lambda-simple/response",
            {"results": list(results), "region": REGION},
        )

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


@dataclass(frozen=True)
class Call:
    """One request passing through the proxy."""

    method: str
    path: str
    operation: str
    """`X-Amz-Target` (JSON services) or `METHOD /path` (Lambda's REST API)."""
    body: bytes


LAMBDA_API_VERSIONS = frozenset({"2015-03-31", "2016-08-19", "2017-03-31", "2018-10-31"})
"""First path segments of Lambda's REST API (its throttling error is TooManyRequests)."""

Rewrite = Callable[[Call, dict[str, Any]], dict[str, Any] | None]
Intercept = Callable[[Call], tuple[int, list[tuple[str, str]], bytes] | None]
"""Answers a call itself (what moto does not emulate), or None to forward it."""


def _lambda_path(path: str) -> bool:
    return path.split("/")[1] in LAMBDA_API_VERSIONS


class AwsProxy:
    """Forwards to moto; throttles a share of calls; lets tests rewrite JSON answers."""

    def __init__(self, upstream: str, seed: int = 7) -> None:
        self.upstream = upstream.removeprefix("http://")
        self.throttle_rate = 0.0
        self.random = random.Random(seed)
        self.rewrites: list[Rewrite] = []
        self.intercepts: list[Intercept] = []
        self.counts: Counter[str] = Counter()
        self.throttled: Counter[str] = Counter()
        self._lock = threading.Lock()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                return

            def _handle(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                target = self.headers.get("X-Amz-Target")
                call = Call(self.command, self.path, target or f"{self.command} {self.path}", body)
                status, headers, payload = proxy._answer(call, dict(self.headers.items()))
                self.send_response(status)
                for key, value in headers:
                    if key.lower() not in ("content-length", "transfer-encoding", "connection"):
                        self.send_header(key, value)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            do_GET = do_POST = do_PUT = do_DELETE = do_HEAD = do_PATCH = _handle

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def start(self) -> AwsProxy:
        self._thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def _throttle(self, call: Call) -> tuple[int, list[tuple[str, str]], bytes] | None:
        with self._lock:
            self.counts[call.operation] += 1
            if not (self.throttle_rate and self.random.random() < self.throttle_rate):
                return None
            self.throttled[call.operation] += 1
        if _lambda_path(call.path):
            code, status = "TooManyRequestsException", 429
        else:
            code, status = "ThrottlingException", 400
        body = json.dumps({"__type": code, "message": "Rate exceeded"}).encode()
        return status, [("x-amzn-ErrorType", code), ("Content-Type", "application/json")], body

    def _answer(
        self, call: Call, headers: dict[str, str]
    ) -> tuple[int, list[tuple[str, str]], bytes]:
        refused = self._throttle(call)
        if refused is not None:
            return refused
        for intercept in list(self.intercepts):
            answered = intercept(call)
            if answered is not None:
                return answered
        connection = http.client.HTTPConnection(self.upstream, timeout=60)
        try:
            forward = {k: v for k, v in headers.items() if k.lower() != "connection"}
            connection.request(call.method, call.path, body=call.body or None, headers=forward)
            response = connection.getresponse()
            payload = response.read()
            answer_headers = response.getheaders()
            status = response.status
        finally:
            connection.close()
        if status == 200 and self.rewrites and payload[:1] == b"{":
            with contextlib.suppress(ValueError):
                document = json.loads(payload)
                changed = False
                for rewrite in list(self.rewrites):
                    result = rewrite(call, document)
                    if result is not None:
                        document, changed = result, True
                if changed:
                    payload = json.dumps(document).encode()
        return status, answer_headers, payload


async def _call_async(url: str, service: str, operation: str, params: dict[str, Any]) -> Any:
    session = get_session()
    async with session.create_client(
        service,
        region_name=REGION,
        endpoint_url=url,
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    ) as client:
        answer = dict(await getattr(client, operation)(**params))
        for key, value in list(answer.items()):
            if hasattr(value, "read"):
                answer[key] = await value.read()
        return answer


class Aws:
    """The tests' own AWS calls, straight to moto (never through the proxy)."""

    def __init__(self, moto: MotoServer) -> None:
        self.moto = moto

    def __call__(self, service: str, operation: str, **params: Any) -> Any:
        return asyncio.run(_call_async(self.moto.url, service, operation, params))

    def network(self) -> tuple[str, str]:
        """A subnet (in a VPC with DNS hostnames, which moto's RunTask needs) and a group."""
        vpc = self("ec2", "create_vpc", CidrBlock="10.0.0.0/16")["Vpc"]["VpcId"]
        self("ec2", "modify_vpc_attribute", VpcId=vpc, EnableDnsHostnames={"Value": True})
        subnet = self("ec2", "create_subnet", VpcId=vpc, CidrBlock="10.0.1.0/24")
        group = self(
            "ec2", "create_security_group", GroupName=f"g-{vpc}", Description="vkpy", VpcId=vpc
        )
        return subnet["Subnet"]["SubnetId"], group["GroupId"]

    def role(self, name: str) -> str:
        policy = {
            "Version": "2012-10-17",
            "Statement": [
                {
                    "Effect": "Allow",
                    "Principal": {"Service": ["lambda.amazonaws.com", "ecs-tasks.amazonaws.com"]},
                    "Action": "sts:AssumeRole",
                }
            ],
        }
        try:
            answer = self(
                "iam", "create_role", RoleName=name, AssumeRolePolicyDocument=json.dumps(policy)
            )
        except Exception:
            answer = self("iam", "get_role", RoleName=name)
        return str(answer["Role"]["Arn"])

    def put_zip(self, bucket: str, key: str, files: dict[str, str]) -> None:
        """A zip of `files` at s3://bucket/key."""
        buffer = io.BytesIO()
        with zipfile.ZipFile(buffer, "w") as archive:
            for name, text in files.items():
                archive.writestr(name, text)
        with contextlib.suppress(Exception):
            self("s3", "create_bucket", Bucket=bucket)
        self("s3", "put_object", Bucket=bucket, Key=key, Body=buffer.getvalue())

    async def acall(self, service: str, operation: str, **params: Any) -> Any:
        """The same call from async code."""
        return await _call_async(self.moto.url, service, operation, params)

    def put_logs(self, group: str, stream: str, *lines: str) -> None:
        with contextlib.suppress(Exception):
            self("logs", "create_log_group", logGroupName=group)
        with contextlib.suppress(Exception):
            self("logs", "create_log_stream", logGroupName=group, logStreamName=stream)
        now = int(time.time() * 1000)
        self(
            "logs",
            "put_log_events",
            logGroupName=group,
            logStreamName=stream,
            logEvents=[{"timestamp": now + i, "message": line} for i, line in enumerate(lines)],
        )


@contextlib.contextmanager
def fake_aws_environment(endpoint: str) -> Iterator[dict[str, str]]:
    """os.environ with fake credentials and every AWS endpoint at `endpoint`, restored after.

    Agents started meanwhile inherit it, so vkpy cannot reach real AWS."""
    saved = {k: v for k, v in os.environ.items() if k.startswith("AWS_")}
    for key in saved:
        del os.environ[key]
    values = {**FAKE_AWS_ENV, "AWS_ENDPOINT_URL": endpoint}
    os.environ.update(values)
    try:
        yield values
    finally:
        for key in values:
            os.environ.pop(key, None)
        os.environ.update(saved)


def exit_code_rewrite(task_arn: str, code: int) -> Any:
    """DescribeTasks reports `code` for the task's containers once it stopped (moto
    always reports 0)."""

    def rewrite(call: Call, document: dict[str, Any]) -> dict[str, Any] | None:
        if not call.operation.endswith(".DescribeTasks"):
            return None
        for task in document.get("tasks") or []:
            if task.get("taskArn") == task_arn and task.get("lastStatus") == "STOPPED":
                for container in task.get("containers") or []:
                    container["exitCode"] = code
        return document

    return rewrite
