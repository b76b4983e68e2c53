# ruff: noqa
from __future__ import annotations
import json, subprocess, time
from pathlib import Path
from tests.integration.agent import Kube, wait_for
from tests.integration.process_fixtures import (  # noqa: F401
    StartProcessAgent,
    phase_is,
    process_pod,
    start_process_agent,
)


def test_debug(kube: Kube, start_process_agent: StartProcessAgent) -> None:
    agent = start_process_agent()
    pods = agent.state_dir / "process" / "pods"
    kube.create(process_pod("dbg", agent.node_name, "sleep 3600"))
    wait_for("exit", lambda: list(pods.glob("*/containers/app/instances/0/exit.json")), timeout=60)
    r = subprocess.run(
        f"cat {pods}/*/containers/app/instances/0/*", shell=True, capture_output=True, text=True
    )
    print(r.stdout, r.stderr)
    print(agent.logs()[-3000:])
    assert False
