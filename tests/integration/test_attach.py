"""`kubectl attach` to a container that reads stdin, through the real API server.

On the process backend the container is `sh` reading lines from its stdin (the FIFO
the supervisor keeps for `stdin: true`; `stdinOnce`, so the session outlasts the
client's input) and echoing them to its stdout, which attach follows; `quit` makes
it exit, which ends the attach. On the sim backend the "main
process" echoes stdin back. Both transports.
"""

# ruff: noqa: F811 - pytest fixtures are imported by name and then requested as arguments
from __future__ import annotations

import subprocess

import pytest

from tests.integration.agent import Kube, wait_for
from tests.integration.stream_fixtures import Box, process_box, sim_box  # noqa: F401
from tests.integration.stream_helpers import TRANSPORTS, kubectl, start_kubectl
from vkpy.devcluster import ClusterAccess


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_attach_to_a_process_reading_stdin(
    cluster: ClusterAccess, kube: Kube, process_box: Box, namespace: str, transport: str
) -> None:
    client = start_kubectl(
        cluster,
        "attach",
        "-i",
        "-n",
        namespace,
        "box",
        "-c",
        "app",
        transport=transport,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert client.stdin is not None
    try:
        out, err = client.communicate(b"first line\nsecond line\nquit\n", timeout=30)
    finally:
        client.kill()
    assert client.returncode == 0, err
    assert out.decode().splitlines() == ["got: first line", "got: second line", "got: quit"]

    def app_ended() -> dict[str, object] | None:
        for status in (kube.get("pod", "box") or {})["status"]["containerStatuses"]:
            if status["name"] == "app" and "terminated" in status["state"]:
                return dict(status["state"]["terminated"])
        return None

    assert wait_for("the app container to end", app_ended)["exitCode"] == 0


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_attach_on_sim(
    cluster: ClusterAccess, sim_box: Box, namespace: str, transport: str
) -> None:
    got = kubectl(
        cluster,
        "attach",
        "-i",
        "-n",
        namespace,
        "box",
        transport=transport,
        input=b"echoed by the main process\n",
    )
    assert got.returncode == 0, got.stderr
    assert got.stdout == b"echoed by the main process\n"
