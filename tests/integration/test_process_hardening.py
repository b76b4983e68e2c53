"""The process backend's pods without privileges (issue 12, hardening): no capabilities,
`no_new_privs`, a seccomp filter refusing the obvious escapes, and the node's `allow`
setting for what a pod may ask beyond that.

What a user would check from inside a pod: /proc/self/status, `unshare -U`, and the
refused system calls themselves, for the main process, `kubectl exec` and probes;
ordinary workloads (a shell, Python with threads, an HTTP server behind probes) still
work; privileged, host namespaces and unconfined pods are refused with a reason and an
Event by default, and run as asked on a node that allows them.
"""

# ruff: noqa: F811 - pytest fixtures are imported by name and then requested as arguments
from __future__ import annotations

import json
import os
import random
import re
import socket
from pathlib import Path
from typing import Any

from tests.integration.agent import Kube, free_port, wait_for
from tests.integration.cannot_start import cannot_start
from tests.integration.process_fixtures import (  # noqa: F401 - fixtures
    StartProcessAgent,
    condition,
    phase_is,
    process_pod,
    reachable_pods_dir,
    start_process_agent,
)
from vkpy.providers.process.seccomp import ARCHITECTURES

NUMBERS = ARCHITECTURES[os.uname().machine][1]
CALLS = {
    # name: arguments that work for an unprivileged user without the filter (or fail
    # with another error than EPERM), so EPERM is the filter's answer
    "unshare": [0x10000000],  # CLONE_NEWUSER: allowed to any user on this host
    "setns": ["fd", 0],
    "keyctl": [0, -3, 0],  # KEYCTL_GET_KEYRING_ID of the session keyring
    "add_key": [0, 0, 0, 0, 0],
    "ptrace": [0, 0, 0, 0],  # PTRACE_TRACEME
    "mount": [0, 0, 0, 0, 0],
    "umount2": [0, 0],
    "pivot_root": [0, 0],
    "bpf": [0, 0, 0],
    "perf_event_open": [0, 0, -1, -1, 0],
    "userfaultfd": [0],
    "open_by_handle_at": [-1, 0, 0],
    "init_module": [0, 0, 0],
    "kexec_load": [0, 0, 0, 0],
    "reboot": [0, 0, 0, 0],
    "acct": [0],
    "swapon": [0, 0],
    "settimeofday": [0, 0],
    "clock_settime": [0, 0],
}
SYSCALLS = f"""
import ctypes, errno, os, threading
libc = ctypes.CDLL(None, use_errno=True)
fd = os.open("/proc/self/ns/uts", os.O_RDONLY)
calls = {json.dumps({name: [NUMBERS[name], args] for name, args in CALLS.items()})}
for name, (number, args) in calls.items():
    values = [ctypes.c_long(fd if a == "fd" else a) for a in args]
    ctypes.set_errno(0)
    result = libc.syscall(number, *values)
    code = ctypes.get_errno()
    print("CALL", name, "OK" if result != -1 else errno.errorcode.get(code, code))
worker = threading.Thread(target=print, args=("THREAD-OK",))
worker.start()
worker.join()
"""
STATUS = "grep -E '^(Cap|NoNewPrivs|Seccomp)' /proc/self/status"


def settings(**values: Any) -> dict[str, Any]:
    """Provider settings with ids of this test's own: other vkpy nodes of this host
    (other test runs) take the default range's ids too, and end whatever runs as
    them when their pods go."""
    first = random.randrange(400_000, 900_000, 1000)
    return {"pod_uid_range": f"{first}-{first + 999}", **values}


def _log(pods: Path, kube: Kube, name: str, container: str = "app") -> str | None:
    pod = kube.get("pod", name)
    if pod is None:
        return None
    path = pods / pod["metadata"]["uid"] / f"containers/{container}/instances/0/output.log"
    try:
        text = "\n".join(line.split(" ", 3)[-1] for line in path.read_text().splitlines())
    except OSError:
        return None
    return text if "DONE" in text else None


def status_fields(text: str) -> dict[str, str]:
    """The /proc/<pid>/status lines printed by STATUS."""
    return dict(re.findall(r"^(Cap\w+|NoNewPrivs|Seccomp):\s+(\S+)$", text, re.MULTILINE))


def assert_confined(text: str) -> None:
    fields = status_fields(text)
    assert fields["NoNewPrivs"] == "1", text
    assert fields["Seccomp"] == "2", text
    for kind in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"):
        assert int(fields[kind], 16) == 0, (kind, text)


def test_pod_processes_have_no_privileges_and_the_escapes_are_refused(
    kube: Kube, start_process_agent: StartProcessAgent, reachable_pods_dir: Path
) -> None:
    pods = reachable_pods_dir
    agent = start_process_agent(settings(pods_dir=str(pods)))
    port = free_port()
    script = (
        f"{STATUS}; unshare -U true 2>/dev/null && echo UNSHARE-USER-OK; "
        "unshare -Ur true 2>/dev/null && echo UNSHARE-ROOT-OK; "
        'python3 -c "$PROGRAM"; echo DONE; '
        f"exec python3 -m http.server {port} --bind 127.0.0.1"
    )
    fast = {"periodSeconds": 1, "failureThreshold": 1, "timeoutSeconds": 5}
    container = {
        "env": [{"name": "PROGRAM", "value": SYSCALLS}],
        "readinessProbe": {
            "exec": {"command": ["sh", "-c", "grep -q '^Seccomp:.2$' /proc/self/status"]},
            **fast,
        },
        "livenessProbe": {"httpGet": {"path": "/", "port": port}, **fast, "failureThreshold": 5},
    }
    kube.create(process_pod("confined", agent.node_name, script, "Always", container=container))
    log = wait_for("the pod's report", lambda: _log(pods, kube, "confined"))
    assert_confined(log)
    assert "UNSHARE-USER-OK" not in log and "UNSHARE-ROOT-OK" not in log, log
    answers = dict(re.findall(r"^CALL (\w+) (\S+)$", log, re.MULTILINE))
    assert answers == dict.fromkeys(CALLS, "EPERM"), log
    assert "THREAD-OK" in log
    # The exec probe is confined too, and the HTTP server answers the liveness probe.
    wait_for("Ready", lambda: condition(kube.get("pod", "confined"), "Ready") == "True")
    exec_out = kube.kubectl(
        "exec",
        "-n",
        kube.namespace,
        "confined",
        "--",
        "sh",
        "-c",
        f"{STATUS}; unshare -Ur true 2>/dev/null || echo REFUSED; echo DONE",
    )
    assert_confined(exec_out)
    assert "REFUSED" in exec_out
    pod = kube.get("pod", "confined")
    assert pod is not None
    assert pod["status"]["containerStatuses"][0]["restartCount"] == 0


def _refused(kube: Kube, name: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The refused pod (Pending, Waiting with a reason: never Failed, issue 31) and
    its Warning Events."""
    found = cannot_start(kube, name)
    return found, found["events"]


ASKS: dict[str, tuple[dict[str, Any], dict[str, Any], str]] = {
    # pod name: (pod spec fields, container securityContext, words of the refusal)
    "host-pid": ({"hostPID": True}, {}, "hostPID"),
    "host-network": ({"hostNetwork": True}, {}, "hostNetwork"),
    "host-ipc": ({"hostIPC": True}, {}, "hostIPC"),
    "privileged": ({}, {"privileged": True}, "privileged"),
    "caps": ({}, {"capabilities": {"add": ["NET_BIND_SERVICE"]}}, "NET_BIND_SERVICE"),
    "unconfined": ({}, {"seccompProfile": {"type": "Unconfined"}}, "Unconfined"),
    "localhost": (
        {},
        {"seccompProfile": {"type": "Localhost", "localhostProfile": "x.json"}},
        "Localhost",
    ),
}


def test_privileges_and_host_namespaces_are_refused_by_default_with_an_event(
    kube: Kube, start_process_agent: StartProcessAgent
) -> None:
    agent = start_process_agent(settings())
    for name, (spec, security, _) in ASKS.items():
        kube.create(
            process_pod(
                name, agent.node_name, "sleep 3600", container={"securityContext": security}, **spec
            )
        )
    for name, (_, _, words) in ASKS.items():
        refused, events = _refused(kube, name)
        assert refused["reason"] == "CreateContainerError", name
        assert refused["message"].startswith("UnsupportedSecurityContext: "), refused
        assert words in refused["message"], refused
        assert any(words in e["message"] for e in events), events
        if name != "localhost":
            assert "does not allow" in refused["message"], refused


def _free_low_port() -> int:
    """A port below net.ipv4.ip_unprivileged_port_start that nothing uses."""
    for port in range(990, 900, -1):
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise AssertionError("no free port below 1024")


def test_a_node_that_allows_them_runs_privileged_capable_and_host_namespace_pods(
    kube: Kube, start_process_agent: StartProcessAgent, reachable_pods_dir: Path
) -> None:
    pods = reachable_pods_dir
    allow = ["privileged", "capabilities", "hostPID", "hostNetwork", "hostIPC", "unconfined"]
    agent = start_process_agent(settings(pods_dir=str(pods), allow=allow))
    low = _free_low_port()
    bind = (
        f"python3 -c \"import socket; socket.socket().bind(('127.0.0.1', {low})); print('BOUND')\""
    )
    report = f"{STATUS}; unshare -m true 2>/dev/null && echo UNSHARE-OK; "
    containers: list[dict[str, Any]] = [
        {"name": "priv", "securityContext": {"privileged": True}},
        {
            "name": "caps",
            "securityContext": {
                "capabilities": {"add": ["NET_BIND_SERVICE"], "drop": ["ALL"]},
                "seccompProfile": {"type": "RuntimeDefault"},
            },
        },
        {"name": "plain", "securityContext": {"seccompProfile": {"type": "Unconfined"}}},
    ]
    for entry in containers:
        entry.update(
            image="busybox:1.36",
            command=["sh", "-c", f"{report}{bind} 2>/dev/null; echo DONE; sleep 3600"],
        )
    manifest = process_pod("allowed", agent.node_name, "", hostPID=True, hostNetwork=True)
    manifest["spec"].update(containers=containers, hostIPC=True)
    kube.create(manifest)
    wait_for("Running", lambda: phase_is(kube, "allowed", "Running"))
    logs = {
        c["name"]: wait_for(c["name"], lambda c=c: _log(pods, kube, "allowed", c["name"]))
        for c in containers
    }
    privileged = status_fields(logs["priv"])
    assert int(privileged["CapEff"], 16) != 0 and privileged["CapEff"] == privileged["CapBnd"]
    assert privileged["NoNewPrivs"] == "0" and privileged["Seccomp"] == "0"
    assert "UNSHARE-OK" in logs["priv"] and "BOUND" in logs["priv"]
    capable = status_fields(logs["caps"])
    assert int(capable["CapEff"], 16) == 1 << 10  # CAP_NET_BIND_SERVICE, nothing else
    assert capable["CapBnd"] == capable["CapEff"] and capable["Seccomp"] == "2"
    assert "BOUND" in logs["caps"] and "UNSHARE-OK" not in logs["caps"]
    plain = status_fields(logs["plain"])
    assert plain["Seccomp"] == "0" and plain["NoNewPrivs"] == "1"
    assert int(plain["CapEff"], 16) == 0 and int(plain["CapBnd"], 16) == 0
    assert "BOUND" not in logs["plain"] and "UNSHARE-OK" not in logs["plain"]
