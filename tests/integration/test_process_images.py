"""Image-only pods on the process backend, through the `images` setting: Kubernetes'
test image agnhost (built from its Go module) with a subcommand as args, and the
pause and busybox stand-ins, checked as a user would: through kubectl and HTTP."""

# ruff: noqa: F811 - pytest fixtures are imported by name and then requested as arguments
from __future__ import annotations

import shutil
import urllib.request
from pathlib import Path

from tests.integration.agent import Kube, free_port, wait_for
from tests.integration.process_fixtures import (  # noqa: F401 - fixtures
    StartProcessAgent,
    phase_is,
    program_dir,
    start_process_agent,
    status_of,
)
from vkpy.devcluster.binaries import tool_dir

AGNHOST = "registry.k8s.io/e2e-test-images/agnhost:2.63.0"


def image_pod(name: str, node: str, image: str, **container: object) -> dict[str, object]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "nodeName": node,
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 5,
            "containers": [{"name": "app", "image": image, **container}],
            "tolerations": [{"operator": "Exists"}],
        },
    }


def fetch(url: str) -> str | None:
    try:
        with urllib.request.urlopen(url, timeout=5) as answer:
            return str(answer.read().decode())
    except OSError:
        return None


def test_agnhost_pause_and_busybox_pods_run_from_their_images(
    kube: Kube, start_process_agent: StartProcessAgent, program_dir: Path
) -> None:
    # The containers' user must reach the program: the build cache is under /root.
    shutil.copy2(tool_dir("agnhost") / "agnhost", program_dir / "agnhost")
    images = {"*/agnhost": {"entrypoint": ["/agnhost"], "path": [str(program_dir)]}}
    agent = start_process_agent(config={"images": images})
    port = free_port()
    kube.create(
        image_pod("netexec", agent.node_name, AGNHOST, args=["netexec", f"--http-port={port}"])
    )
    kube.create(image_pod("pause", agent.node_name, "registry.k8s.io/pause:3.10.2"))
    kube.create(
        image_pod(
            "shell",
            agent.node_name,
            "registry.k8s.io/e2e-test-images/busybox:1.37.0-1",
            args=["/bin/sh", "-c", '[[ 1 -eq 1 ]] && env | grep "^with-dash="'],
            env=[{"name": "with-dash", "value": "kept"}],
        )
    )
    wait_for("netexec Running", lambda: phase_is(kube, "netexec", "Running"))
    answer = wait_for("netexec answers", lambda: fetch(f"http://127.0.0.1:{port}/echo?msg=hi"))
    assert answer == "hi"
    wait_for("pause Running", lambda: phase_is(kube, "pause", "Running"))
    done = wait_for("shell Succeeded", lambda: phase_is(kube, "shell", "Succeeded"))
    assert status_of(done)["state"]["terminated"]["exitCode"] == 0
    assert kube.kubectl("logs", "-n", kube.namespace, "shell") == "with-dash=kept\n"
    kube.kubectl("delete", "pod", "-n", kube.namespace, "pause", "--wait=false")
    wait_for("pause gone", lambda: kube.get("pod", "pause") is None)
