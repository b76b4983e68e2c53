"""A fixed subset of Kubernetes' own conformance specs, run by `make test` (issue 18).

The whole selection (`make conformance`) takes about an hour on two cores, too long
for CI; docs/conformance.md holds its result. These specs, one or two for each
kubelet behaviour the process backend had to learn (images that run, the downward
API, termination messages, init containers, lifecycle hooks, volumes, runAsNonRoot,
the node's /etc/hosts mounted in a pod, exec and logs through the API server), run
here through the same runner, in its own network namespace with its own control
plane, and every one of them must pass. The runner records nothing (`--report ''
--results ''`): CI does not rewrite the document.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conformance.report import read_junit

pytestmark = pytest.mark.timeout(1500)

REPO = Path(__file__).resolve().parents[2]

SUBSET = (
    "[sig-node] Pods should get a host IP [NodeConformance] [Conformance]",
    "[sig-node] Containers should be able to override the image's default command and "
    "arguments [NodeConformance] [Conformance]",
    "[sig-node] Downward API should provide container's limits.cpu/memory and "
    "requests.cpu/memory as env vars [NodeConformance] [Conformance]",
    "[sig-node] Container Runtime blackbox test on terminated container should report "
    "termination message from log output if TerminationMessagePolicy FallbackToLogsOnError "
    "is set [NodeConformance] [Conformance]",
    "[sig-node] InitContainer [NodeConformance] should invoke init containers on a "
    "RestartNever pod [Conformance]",
    "[sig-node] Container Lifecycle Hook when create a pod with lifecycle hook should "
    "execute poststart http hook properly [NodeConformance] [Conformance]",
    "[sig-storage] ConfigMap should be consumable from pods in volume [NodeConformance] "
    "[Conformance]",
    "[sig-node] Security Context When creating a container with runAsNonRoot "
    "[NodeConformance] should not run with an explicit root user ID [LinuxOnly]",
    "[sig-node] KubeletManagedEtcHosts should test kubelet managed /etc/hosts file "
    "[NodeConformance] [Conformance]",
    "[sig-node] Pods should support remote command execution over websockets "
    "[NodeConformance] [Conformance]",
    "[sig-cli] Kubectl logs logs should be able to retrieve and filter logs [Conformance]",
    "[sig-cli] Kubectl client Simple pod should support exec",
)


def _focus(names: tuple[str, ...]) -> str:
    """One Ginkgo focus regex (Go syntax) matching these specs' names to their end
    (Ginkgo matches the text after a prefix of its own, so not from the start)."""
    return "|".join(re.sub(r"([\\.+*?()|\[\]{}^$])", r"\\\1", n) + "$" for n in names)


@pytest.mark.skipif(os.geteuid() != 0, reason="the runner makes a network namespace: root only")
def test_the_fixed_subset_of_node_conformance_passes(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    command = [
        sys.executable,
        str(REPO / "conformance" / "run.py"),
        f"--focus={_focus(SUBSET)}",
        "--procs=3",
        "--timeout=20m",
        f"--keep={run_dir}",
        "--report=",
        "--results=",
    ]
    done = subprocess.run(
        command, cwd=REPO, capture_output=True, text=True, timeout=1400, check=False
    )
    junit = run_dir / "junit-focus.xml"
    assert junit.exists(), done.stdout[-3000:] + done.stderr[-3000:]
    ran = {s.name: s for s in read_junit(junit) if s.status != "skipped"}
    assert sorted(ran) == sorted(SUBSET), f"ran {sorted(ran)}"
    failed = {name: spec.message[:1500] for name, spec in ran.items() if spec.status != "passed"}
    assert not failed, failed
