"""Sidecars stop one at a time in reverse order when their pod is deleted, as with
the kubelet (issue 18, "Restartable Init Container Lifecycle Hook ... prestop http
hook"): a later sidecar's preStop hook reaches an earlier sidecar, which still runs.
Before, all sidecars were stopped at once, so the earlier one was gone (SIGTERM)
while the later one's hook called it.
"""

# ruff: noqa: F811 - pytest fixtures are imported by name and then requested as arguments
from __future__ import annotations

from pathlib import Path

from tests.integration.agent import Kube, free_port, wait_for
from tests.integration.process_fixtures import (  # noqa: F401 - fixtures
    StartProcessAgent,
    phase_is,
    process_pod,
    start_process_agent,
)

RECORDER = """
import http.server, sys
class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        with open("/record/requests", "a") as out:
            out.write(self.path + "\\n")
        self.send_response(200)
        self.end_headers()
    def log_message(self, *args):
        pass
http.server.HTTPServer(("0.0.0.0", int(sys.argv[1])), Handler).serve_forever()
"""


def test_a_sidecars_pre_stop_hook_reaches_the_sidecar_started_before_it(
    kube: Kube, start_process_agent: StartProcessAgent, tmp_path: Path
) -> None:
    record = tmp_path / "record"
    record.mkdir(mode=0o777)
    record.chmod(0o777)
    agent = start_process_agent(config={"host_path_prefixes": [str(tmp_path)]})
    port = free_port()
    pod = process_pod("sidecars", agent.node_name, "trap 'exit 0' TERM; sleep 3600 & wait")
    pod["spec"]["terminationGracePeriodSeconds"] = 20
    pod["spec"]["volumes"] = [{"name": "record", "hostPath": {"path": str(record)}}]
    pod["spec"]["initContainers"] = [
        {
            "name": "recorder",
            "image": "python",
            "command": ["python3", "-c", RECORDER, str(port)],
            "restartPolicy": "Always",
            "volumeMounts": [{"name": "record", "mountPath": "/record"}],
            "startupProbe": {"tcpSocket": {"port": port}, "periodSeconds": 1},
        },
        {
            "name": "hooked",
            "image": "busybox",
            "command": ["sh", "-c", "trap 'exit 0' TERM; sleep 3600 & wait"],
            "restartPolicy": "Always",
            "lifecycle": {"preStop": {"httpGet": {"path": "/prestop", "port": port}}},
        },
    ]
    kube.create(pod)
    wait_for("Running", lambda: phase_is(kube, "sidecars", "Running"), timeout=120)
    kube.kubectl("delete", "pod", "sidecars", "-n", kube.namespace, "--wait=false")
    wait_for("the pod gone", lambda: kube.get("pod", "sidecars") is None, timeout=120)
    requests = (record / "requests").read_text() if (record / "requests").exists() else ""
    assert "/prestop" in requests.splitlines(), requests
