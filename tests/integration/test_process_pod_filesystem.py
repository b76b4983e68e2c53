"""A pod's own filesystem when vkpy runs as root (issue 12): a mount namespace per pod.

What a user checks inside a pod of the process backend: every volume is at its
`mountPath` (the ServiceAccount token where client libraries look for it),
`readOnly` is enforced by the kernel, the host is read-only, /tmp is the pod's own,
a memory emptyDir is a sized tmpfs, /etc/hosts names the pod, and `kubectl exec`
sees the same paths. Each of these failed before (volumes were only links in the
pod's directory, the host was writable where its modes allowed).
"""

# ruff: noqa: F811 - pytest fixtures are imported by name and then requested as arguments
from __future__ import annotations

import shutil
import tempfile
import uuid
from pathlib import Path
from typing import Any

from tests.integration.agent import Agent, Kube, wait_for
from tests.integration.process_fixtures import (  # noqa: F401 - fixtures
    StartProcessAgent,
    phase_is,
    process_pod,
    start_process_agent,
)

SA = "/var/run/secrets/kubernetes.io/serviceaccount"


def _report(agent: Agent, kube: Kube, name: str, container: str = "app") -> str:
    """What the pod's container printed, once it printed DONE."""
    pods = agent.state_dir / "process" / "pods"

    def done() -> str | None:
        pod = kube.get("pod", name)
        if pod is None:
            return None
        log = pods / pod["metadata"]["uid"] / f"containers/{container}/instances/0/output.log"
        try:
            lines = log.read_text().splitlines()
        except OSError:
            return None
        text = "\n".join(line.split(" ", 3)[-1] for line in lines)
        return text if "DONE" in text else None

    found: str = wait_for(f"{name}'s report", done, timeout=120)
    return found


def test_volumes_are_at_their_mount_paths_and_read_only_is_enforced(
    kube: Kube, start_process_agent: StartProcessAgent
) -> None:
    agent = start_process_agent()
    kube.kubectl("create", "configmap", "conf", "--from-literal=key=value", "-n", kube.namespace)
    kube.kubectl(
        "create", "secret", "generic", "creds", "--from-literal=pw=s3cret", "-n", kube.namespace
    )
    script = (
        f"cat {SA}/namespace; echo; test -s {SA}/token && echo TOKEN; "
        f"test -s {SA}/ca.crt && echo CA; "
        "echo CONF=$(cat /etc/app/key); echo SUB=$(cat /etc/one-key); echo PW=$(cat /secret/pw); "
        "echo NAME=$(cat /info/name); "
        "echo data > /scratch/file && echo SCRATCH=$(cat /scratch/file); "
        "echo SUBDIR=$(cat /sub/file 2>&1); "
        "echo x 2>/tmp/e > /ro/new || echo RO-REFUSED=$(cat /tmp/e); "
        "echo x 2>/tmp/e > /secret/pw || echo SECRET-REFUSED=$(cat /tmp/e); "
        "echo x 2>/tmp/e > /etc/app/key || echo CONF-REFUSED=$(cat /tmp/e); "
        "echo DONE; sleep 3600"
    )
    mounts = [
        {"name": "conf", "mountPath": "/etc/app"},
        {"name": "conf", "mountPath": "/etc/one-key", "subPath": "key"},
        {"name": "creds", "mountPath": "/secret", "readOnly": False},
        {"name": "info", "mountPath": "/info"},
        {"name": "scratch", "mountPath": "/scratch"},
        {"name": "scratch", "mountPath": "/sub", "subPath": "a/b"},
        {"name": "scratch", "mountPath": "/ro", "readOnly": True},
    ]
    volumes = [
        {"name": "conf", "configMap": {"name": "conf"}},
        {"name": "creds", "secret": {"secretName": "creds"}},
        {
            "name": "info",
            "downwardAPI": {
                "items": [{"path": "name", "fieldRef": {"fieldPath": "metadata.name"}}]
            },
        },
        {"name": "scratch", "emptyDir": {}},
    ]
    kube.create(
        process_pod(
            "mounted",
            agent.node_name,
            "mkdir -p /scratch/a/b && echo in-sub > /scratch/a/b/file; " + script,
            container={"volumeMounts": mounts},
            volumes=volumes,
        )
    )
    report = _report(agent, kube, "mounted")
    lines = report.splitlines()
    assert lines[0] == kube.namespace, report
    for expected in ("TOKEN", "CA", "CONF=value", "SUB=value", "PW=s3cret", "NAME=mounted"):
        assert expected in lines, report
    assert "SCRATCH=data" in lines and "SUBDIR=in-sub" in lines, report
    for refused in ("RO-REFUSED", "SECRET-REFUSED", "CONF-REFUSED"):
        assert f"{refused}=" in report and "Read-only file system" in report, report
        line = next(x for x in lines if x.startswith(refused))
        assert "Read-only file system" in line, report
    # kubectl exec enters the same view.
    out = kube.kubectl("exec", "-n", kube.namespace, "mounted", "--", "cat", "/etc/app/key")
    assert out == "value"
    out = kube.kubectl("exec", "-n", kube.namespace, "mounted", "--", "cat", f"{SA}/namespace")
    assert out == kube.namespace


def test_kubelet_made_files_have_the_mode_asked_for_and_stay_read_only(
    kube: Kube, start_process_agent: StartProcessAgent
) -> None:
    """A 0400 secret reads back as 0400 (`-r--------`, what a kubelet's pod sees) and
    its container can read it; neither the mount path nor the pod's own directory
    (the relative link layout) lets the pod change, chmod or replace it."""
    agent = start_process_agent()
    kube.kubectl(
        "create", "secret", "generic", "creds", "--from-literal=pw=s3cret", "-n", kube.namespace
    )
    kube.kubectl("create", "configmap", "conf", "--from-literal=key=value", "-n", kube.namespace)
    via_pod_dir = "../../../volumes/creds/..data/pw"
    script = (
        "echo MODE=$(stat -L -c %a /secret/pw) ITEM=$(stat -L -c %a /conf/k) "
        "DEFAULT=$(stat -L -c %a /conf/key); "
        "echo PW=$(cat /secret/pw) K=$(cat /conf/k); "
        "chmod 600 /secret/pw 2>/dev/null || echo CHMOD-REFUSED; "
        f"chmod 600 {via_pod_dir} 2>/dev/null || echo LINK-CHMOD-REFUSED; "
        f"(echo x > {via_pod_dir}) 2>/dev/null || echo LINK-WRITE-REFUSED; "
        f"test -e {via_pod_dir} && echo LINK-SEEN; "
        "echo AFTER=$(cat /secret/pw); echo DONE; sleep 3600"
    )
    mounts = [{"name": "creds", "mountPath": "/secret"}, {"name": "conf", "mountPath": "/conf"}]
    volumes = [
        {"name": "creds", "secret": {"secretName": "creds", "defaultMode": 0o400}},
        {
            "name": "conf",
            "configMap": {
                "name": "conf",
                "items": [
                    {"key": "key", "path": "k", "mode": 0o400},
                    {"key": "key", "path": "key"},
                ],
            },
        },
    ]
    kube.create(
        process_pod(
            "modes",
            agent.node_name,
            script,
            container={"volumeMounts": mounts},
            volumes=volumes,
        )
    )
    lines = _report(agent, kube, "modes").splitlines()
    assert "MODE=400 ITEM=400 DEFAULT=644" in lines, lines
    assert "PW=s3cret K=value" in lines, lines
    for refused in ("CHMOD-REFUSED", "LINK-CHMOD-REFUSED", "LINK-WRITE-REFUSED", "LINK-SEEN"):
        assert refused in lines, lines
    assert "AFTER=s3cret" in lines, lines


def test_an_images_files_are_at_their_paths_in_the_pods_root(
    kube: Kube, start_process_agent: StartProcessAgent
) -> None:
    """`files` of an `images` entry: the image's own programs (agnhost's `/agnhost`)
    exist at their paths for a shell or `kubectl exec`, read-only, and only in pods
    of that image."""
    tool_dir = Path(tempfile.mkdtemp(prefix="vkpy-image-"))
    try:
        tool = tool_dir / "tool.sh"
        tool.write_text("#!/bin/sh\necho TOOL-RAN\n")
        tool.chmod(0o755)
        tool_dir.chmod(0o755)
        images = {"example.com/tool": {"cmd": ["sh"], "files": {"/opt/tool/run": str(tool)}}}
        agent = start_process_agent(config={"images": images})
        script = (
            "/opt/tool/run; (echo x > /opt/tool/run) 2>/dev/null || echo TOOL-READ-ONLY; "
            "echo DONE; sleep 3600"
        )
        kube.create(
            process_pod("imaged", agent.node_name, script, container={"image": "example.com/tool"})
        )
        lines = _report(agent, kube, "imaged").splitlines()
        assert "TOOL-RAN" in lines and "TOOL-READ-ONLY" in lines, lines
        out = kube.kubectl("exec", "-n", kube.namespace, "imaged", "--", "/opt/tool/run")
        assert out.strip() == "TOOL-RAN"
        kube.create(
            process_pod("plain", agent.node_name, "test -e /opt/tool/run || echo NONE; echo DONE")
        )
        assert "NONE" in _report(agent, kube, "plain").splitlines()
    finally:
        shutil.rmtree(tool_dir, ignore_errors=True)


def test_the_host_is_read_only_and_tmp_is_the_pods_own(
    kube: Kube, start_process_agent: StartProcessAgent
) -> None:
    agent = start_process_agent()
    marker = f"vkpy-{uuid.uuid4().hex[:8]}"
    writer = (
        f"echo x 2>/tmp/e > /var/tmp/{marker} || echo HOST-REFUSED=$(cat /tmp/e); "
        f"echo mine > /tmp/{marker} && echo TMP-OK; "
        "echo NODE=$(cat /etc/hostname); grep -w writer /etc/hosts; echo DONE; sleep 3600"
    )
    kube.create(process_pod("writer", agent.node_name, writer))
    report = _report(agent, kube, "writer")
    assert "HOST-REFUSED=" in report and "Read-only file system" in report, report
    assert not Path("/var/tmp", marker).exists()
    assert "TMP-OK" in report and not Path("/tmp", marker).exists()
    assert "NODE=writer" in report
    assert "127.0.0.1\twriter" in report  # the pod's IP (the node's) and its name
    reader = f"ls /tmp/{marker} 2>&1 || echo NOT-SHARED; echo DONE; sleep 3600"
    kube.create(process_pod("reader", agent.node_name, reader))
    assert "NOT-SHARED" in _report(agent, kube, "reader")


def test_read_only_root_filesystem_leaves_only_volumes_writable(
    kube: Kube, start_process_agent: StartProcessAgent
) -> None:
    agent = start_process_agent()
    script = (
        "echo x 2>/tmp/e-tmp > /tmp/x || echo TMP-REFUSED; "
        "echo data > /scratch/f && echo VOLUME-OK; "
        "echo data > /tmp/work/f && echo TMP-VOLUME-OK; echo DONE; sleep 3600"
    )
    kube.create(
        process_pod(
            "rorfs",
            agent.node_name,
            script,
            container={
                "securityContext": {"readOnlyRootFilesystem": True},
                "volumeMounts": [
                    {"name": "scratch", "mountPath": "/scratch"},
                    {"name": "work", "mountPath": "/tmp/work"},
                ],
            },
            volumes=[{"name": "scratch", "emptyDir": {}}, {"name": "work", "emptyDir": {}}],
        )
    )
    report = _report(agent, kube, "rorfs")
    assert "TMP-REFUSED" in report and "VOLUME-OK" in report, report
    assert "TMP-VOLUME-OK" in report, report  # a volume inside /tmp stays writable
    on_tmp = process_pod(
        "tmpvolume",
        agent.node_name,
        "echo data > /tmp/f && echo ON-TMP-OK; echo DONE; sleep 3600",
        container={
            "securityContext": {"readOnlyRootFilesystem": True},
            "volumeMounts": [{"name": "work", "mountPath": "/tmp"}],
        },
        volumes=[{"name": "work", "emptyDir": {}}],
    )
    kube.create(on_tmp)
    assert "ON-TMP-OK" in _report(agent, kube, "tmpvolume")  # a volume on /tmp too


def _scratch_at_tmp(kube: Kube, node: str, pods_dir: Path, container: dict[str, Any]) -> str:
    """Run `container` with the Helm chart's layout (and many images'): a read-only
    root and an emptyDir at /tmp for scratch; what it printed once it printed DONE."""
    container = {
        **container,
        "name": "app",
        "securityContext": {"readOnlyRootFilesystem": True},
        "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}],
    }
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "scratch-tmp"},
        "spec": {
            "nodeName": node,
            "terminationGracePeriodSeconds": 5,
            "containers": [container],
            "volumes": [{"name": "tmp", "emptyDir": {}}],
        },
    }
    kube.create(pod)
    created = wait_for("the pod", lambda: kube.get("pod", "scratch-tmp"))
    log = pods_dir / created["metadata"]["uid"] / "containers/app/instances/0/output.log"
    report: str = wait_for(
        "its report",
        lambda: log.exists() and "DONE" in (text := log.read_text()) and text,
        timeout=120,
    )
    return report


def test_an_empty_dir_at_tmp_stays_writable_with_a_read_only_root(
    kube: Kube, start_process_agent: StartProcessAgent
) -> None:
    """The volume is the pod's writable /tmp (it was made read-only with the pod's own
    /tmp beneath it: vkpy in the chart could not make a temp file)."""
    pods_dir = Path(tempfile.mkdtemp(prefix="vkpy-pods-", dir="/var/tmp"))
    try:
        agent = start_process_agent(config={"pods_dir": str(pods_dir)})
        script = "echo x > /tmp/x && echo TMP-WRITABLE; echo DONE; sleep 3600"
        container = process_pod("scratch-tmp", agent.node_name, script)["spec"]["containers"][0]
        report = _scratch_at_tmp(kube, agent.node_name, pods_dir, container)
        assert "TMP-WRITABLE" in report, report
        kube.kubectl("delete", "pod", "scratch-tmp", "-n", kube.namespace, "--wait=true")
    finally:
        shutil.rmtree(pods_dir, ignore_errors=True)


def test_an_empty_dir_at_tmp_keeps_the_programs_vkpy_has_under_tmp(
    kube: Kube, start_process_agent: StartProcessAgent
) -> None:
    """The same pod running an image whose program lives under /tmp on the host (a CI
    clone of vkpy there, whose virtualenv runs the chart's vkpy image): the pod's root
    binds it back, and the emptyDir at /tmp covered it, so the program was not found;
    what the pod's root binds back below /tmp is attached again on top of the volume."""
    programs = Path(tempfile.mkdtemp(prefix="vkpy-image-", dir="/tmp"))
    pods_dir = Path(tempfile.mkdtemp(prefix="vkpy-pods-", dir="/var/tmp"))
    try:
        program = programs / "scratch"
        program.write_text(
            "#!/bin/sh\necho x > /tmp/x && cat /tmp/x && echo TMP-WRITABLE; echo DONE\n"
            "exec sleep 3600\n"
        )
        program.chmod(0o755)
        programs.chmod(0o755)
        images = {"example.com/scratch": {"entrypoint": [str(program)]}}
        agent = start_process_agent(config={"pods_dir": str(pods_dir), "images": images})
        container = {"image": "example.com/scratch"}
        report = _scratch_at_tmp(kube, agent.node_name, pods_dir, container)
        assert "TMP-WRITABLE" in report, report
        wait_for("Running", lambda: phase_is(kube, "scratch-tmp", "Running"), timeout=60)
        kube.kubectl("delete", "pod", "scratch-tmp", "-n", kube.namespace, "--wait=true")
    finally:
        shutil.rmtree(pods_dir, ignore_errors=True)
        shutil.rmtree(programs, ignore_errors=True)


def test_a_memory_empty_dir_is_a_tmpfs_of_its_size_limit(
    kube: Kube, start_process_agent: StartProcessAgent
) -> None:
    agent = start_process_agent()
    script = "grep ' /cache ' /proc/self/mountinfo; echo DONE; sleep 3600"
    kube.create(
        process_pod(
            "memory",
            agent.node_name,
            script,
            container={"volumeMounts": [{"name": "cache", "mountPath": "/cache"}]},
            volumes=[{"name": "cache", "emptyDir": {"medium": "Memory", "sizeLimit": "16Mi"}}],
        )
    )
    report = _report(agent, kube, "memory")
    assert " - tmpfs " in report and "size=16384k" in report, report
    pod = kube.get("pod", "memory")
    assert pod is not None
    kube.kubectl("delete", "pod", "memory", "-n", kube.namespace, "--wait=true")
    uid = pod["metadata"]["uid"]
    wait_for(
        "the tmpfs gone with the pod", lambda: uid not in Path("/proc/self/mountinfo").read_text()
    )


def test_the_node_says_which_filesystem_mode_it_runs(
    kube: Kube, start_process_agent: StartProcessAgent
) -> None:
    sandboxed = start_process_agent()
    links = start_process_agent(config={"pod_filesystem": False})
    for agent, mode in ((sandboxed, "pod-root"), (links, "links")):
        node = wait_for("node", lambda a=agent: kube.get("node", a.node_name, namespaced=False))
        assert node["metadata"]["labels"]["vkpy.io/process-filesystem"] == mode


def test_the_nodes_hosts_file_mounts_beside_and_over_the_pods_own(
    kube: Kube, start_process_agent: StartProcessAgent
) -> None:
    """The KubeletManagedEtcHosts conformance spec: a hostPath of the node's
    /etc/hosts (a file) at a new path in /etc, and, in another container, over the
    pod's own /etc/hosts. Both containers start and see what they mounted."""
    agent = start_process_agent(config={"host_path_prefixes": ["/etc/hosts"]})
    node_hosts = Path("/etc/hosts").read_text()
    first_line = next(line for line in node_hosts.splitlines() if line.strip())
    hosts = {"name": "node-hosts", "hostPath": {"path": "/etc/hosts", "type": "FileOrCreate"}}
    beside = {"volumeMounts": [{"name": "node-hosts", "mountPath": "/etc/hosts-original"}]}
    over = {
        "name": "over",
        "image": "busybox:1.36",
        "command": ["sh", "-c", "cat /etc/hosts; echo DONE; sleep 3600"],
        "volumeMounts": [
            {"name": "node-hosts", "mountPath": "/etc/hosts-original"},
            {"name": "node-hosts", "mountPath": "/etc/hosts"},
        ],
    }
    pod = process_pod(
        "hosts",
        agent.node_name,
        "cat /etc/hosts-original; grep -w hosts /etc/hosts; echo DONE; sleep 3600",
        container=beside,
        volumes=[hosts],
    )
    pod["spec"]["containers"].append(over)
    kube.create(pod)
    report = _report(agent, kube, "hosts")
    assert first_line in report, report
    assert "\thosts" in report, report  # the pod's own /etc/hosts is still there
    assert first_line in _report(agent, kube, "hosts", container="over")


def test_a_mount_that_cannot_be_made_says_why_in_the_status(
    kube: Kube, start_process_agent: StartProcessAgent
) -> None:
    """A directory volume over a file of the root cannot be mounted: the container
    ends ContainerCannotRun and its status says which mount and why (not only that
    something failed while entering the container)."""
    agent = start_process_agent()
    kube.create(
        process_pod(
            "clash",
            agent.node_name,
            "echo never",
            container={"volumeMounts": [{"name": "scratch", "mountPath": "/etc/passwd"}]},
            volumes=[{"name": "scratch", "emptyDir": {}}],
        )
    )

    def ended() -> dict[str, Any] | None:
        pod = kube.get("pod", "clash") or {}
        for status in pod.get("status", {}).get("containerStatuses") or []:
            terminated = status.get("state", {}).get("terminated")
            if terminated:
                return dict(terminated)
        return None

    terminated = wait_for("the container to end", ended, timeout=120)
    assert terminated["reason"] == "ContainerCannotRun", terminated
    assert "'/etc/passwd' is not a directory like its volume" in terminated["message"], terminated
