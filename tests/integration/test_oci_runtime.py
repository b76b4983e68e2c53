"""The OCI runtime library against the real runc (Debian's, as root): a pod sandbox
in a user namespace of its own and containers joining it, built from the spec that
vkpy/oci/runtime/spec.py generates. Each test checks what a user of the pod would."""

from __future__ import annotations

import asyncio
import gc
import os
import re
import stat
import tempfile
import weakref
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.integration.oci.pods import (
    RuncPod,
    cgroup_dirs,
    log_has,
    pid_alive,
    remove_work,
    runtime_default,
    status_ids,
    wait_for,
)
from vkpy.oci.runtime import console, runc, sandbox, spec

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0, reason="runc makes user namespaces and cgroups here as root only"
)

SLEEP = "sleep 2147483647"


@pytest.fixture
async def pod() -> AsyncIterator[RuncPod]:
    # Not tmp_path: its parents are mode 0700, and the pod's root (a mapped id) must
    # be able to reach its root filesystem.
    work = Path(tempfile.mkdtemp(prefix="vkpy-oci-"))
    work.chmod(0o711)
    made = RuncPod(work)
    try:
        await made.start_sandbox()
        yield made
    finally:
        await made.cleanup()
        remove_work(work)


async def test_root_in_the_pod_is_a_mapped_id_on_the_host(pod: RuncPod) -> None:
    state, log = await pod.run("app", f"id -u; id -g; cat /proc/self/uid_map; {SLEEP}")
    await wait_for(log_has(log, "65536"))
    lines = log.read_text().split("\n")
    assert lines[0:2] == ["0", "0"]
    assert lines[2].split() == ["0", str(pod.id_base), "65536"]
    uids, gids = status_ids(state.pid)
    assert uids == [pod.id_base] * 4
    assert gids == [pod.id_base] * 4


async def test_a_pod_user_and_groups_are_mapped_too(pod: RuncPod) -> None:
    state, log = await pod.run(
        "app",
        f"id; {SLEEP}",
        process={"uid": 10001, "gid": 3000, "additional_gids": (4000,)},
    )
    await wait_for(log_has(log, "uid="))
    assert log.read_text().startswith("uid=10001 gid=3000 groups=3000,4000")
    uids, gids = status_ids(state.pid)
    assert uids == [pod.id_base + 10001] * 4
    assert gids == [pod.id_base + 3000] * 4


async def test_host_files_outside_the_image_and_volumes_are_not_readable(pod: RuncPod) -> None:
    secret = pod.work / "host-secret"
    secret.write_text("host only\n")
    secret.chmod(0o644)
    shared = pod.work / "volume"
    shared.mkdir()
    (shared / "given").write_text("through the volume\n")
    _, log = await pod.run(
        "app",
        f"cat {secret} /etc/shadow /proc/1/root{secret}; cat /data/given; echo done",
        volumes=[spec.BindMount(str(shared), "/data", read_only=True)],
    )
    await wait_for(log_has(log, "done"))
    text = log.read_text()
    assert "host only" not in text
    assert f"cat: can't open '{secret}': No such file or directory" in text
    assert "through the volume" in text


async def test_read_only_root_filesystem_refuses_a_write(pod: RuncPod) -> None:
    read_only = spec.Security(read_only_root=True, seccomp=runtime_default())
    _, log = await pod.run(
        "readonly", "touch /made-here && echo wrote; echo done", security=read_only
    )
    _, writable_log = await pod.run("writable", "touch /made-here && echo wrote; echo done")
    await wait_for(log_has(log, "done"))
    await wait_for(log_has(writable_log, "done"))
    assert "Read-only file system" in log.read_text()
    assert "wrote" not in log.read_text()
    assert "wrote" in writable_log.read_text()
    made = pod.rootfs / "made-here"
    assert made.stat().st_uid == pod.id_base


async def test_a_read_only_volume_refuses_a_write_and_a_writable_one_takes_it(
    pod: RuncPod,
) -> None:
    config, data = pod.work / "config", pod.work / "data"
    for directory in (config, data):
        directory.mkdir()
        os.chown(directory, pod.id_base, pod.id_base)
    script = (
        "touch /config/x && echo config-wrote; echo hi > /data/out && echo data-wrote; echo done"
    )
    _, log = await pod.run(
        "app",
        script,
        volumes=[
            spec.BindMount(str(config), "/config", read_only=True),
            spec.BindMount(str(data), "/data"),
        ],
    )
    await wait_for(log_has(log, "done"))
    text = log.read_text()
    assert "config-wrote" not in text and "Read-only file system" in text
    assert "data-wrote" in text
    assert not (config / "x").exists()
    assert (data / "out").read_text() == "hi\n"
    assert (data / "out").stat().st_uid == pod.id_base


async def test_memory_and_cpu_limits_are_in_the_containers_cgroup(pod: RuncPod) -> None:
    state, _ = await pod.run(
        "app",
        SLEEP,
        resources=spec.Resources(
            cpu_request_milli=250, cpu_limit_milli=500, memory_limit=64 << 20, pids_limit=50
        ),
    )
    dirs = cgroup_dirs(state.pid)
    memory = dirs.get("memory")
    if memory is not None:  # cgroup v1 or hybrid: the v1 memory controller
        assert (memory / "memory.limit_in_bytes").read_text().strip() == str(64 << 20)
        assert (dirs["cpu"] / "cpu.cfs_quota_us").read_text().strip() == "50000"
        assert (dirs["cpu"] / "cpu.shares").read_text().strip() == "256"
        assert (dirs["pids"] / "pids.max").read_text().strip() == "50"
    else:  # cgroup v2
        unified = dirs[""]
        assert (unified / "memory.max").read_text().strip() == str(64 << 20)
        assert (unified / "cpu.max").read_text().split() == ["50000", "100000"]
        assert (unified / "pids.max").read_text().strip() == "50"
    stats = await pod.runc.stats("app")
    assert stats["memory"]["usage"]["limit"] == 64 << 20
    assert stats["pids"]["current"] >= 1


async def test_runtime_default_seccomp_blocks_what_its_profile_blocks(pod: RuncPod) -> None:
    # personality(ADDR_NO_RANDOMIZE) is not among the values the profile allows;
    # busybox's linux64 -R asks for it.
    script = "linux64 -R cat /proc/self/personality; echo exit=$?"
    _, confined = await pod.run("confined", script)
    unconfined_security = spec.Security(seccomp=spec.Seccomp("Unconfined"))
    _, unconfined = await pod.run("unconfined", script, security=unconfined_security)
    await wait_for(log_has(confined, "exit="))
    await wait_for(log_has(unconfined, "exit="))
    assert "00040000" in unconfined.read_text()
    assert "exit=0" in unconfined.read_text()
    assert "00040000" not in confined.read_text()
    assert "Function not implemented" in confined.read_text()


async def test_containers_of_a_pod_share_localhost_and_ipc(pod: RuncPod) -> None:
    www = pod.rootfs / "www"
    www.mkdir()
    (www / "index.html").write_text("served on the pod's localhost\n")
    await pod.run("server", "touch /dev/mqueue/pod-queue; httpd -f -p 8080 -h /www")
    _, client = await pod.run(
        "client",
        "for i in 1 2 3 4 5 6 7 8 9 10; do wget -qO- http://127.0.0.1:8080/index.html && break;"
        " sleep 0.3; done; ls /dev/mqueue; readlink /proc/self/ns/net; echo done",
    )
    # A container outside the pod's sandbox: a network and IPC namespace of its own.
    _, outsider = await pod.run(
        "outsider",
        "wget -qO- -T 2 http://127.0.0.1:8080/index.html; ls /dev/mqueue;"
        " readlink /proc/self/ns/net; echo done",
        namespaces={"user": None, "network": None, "ipc": None, "pid": None},
    )
    await wait_for(log_has(client, "done"))
    await wait_for(log_has(outsider, "done"))
    text = client.read_text()
    assert "served on the pod's localhost" in text
    assert "pod-queue" in text
    sandbox_net = os.readlink((await pod.sandbox.namespaces())["network"])
    assert sandbox_net in text
    assert os.readlink("/proc/self/ns/net") != sandbox_net
    assert "served" not in outsider.read_text()
    assert "pod-queue" not in outsider.read_text()
    assert sandbox_net not in outsider.read_text()


async def test_a_pod_sharing_its_process_namespace_with_a_sysctl(pod: RuncPod) -> None:
    shared = sandbox.PodSandbox(pod.runc, f"{pod.cgroup_parent}-shared")
    config = sandbox.SandboxConfig(
        rootfs=str(pod.rootfs),
        args=["/bin/sleep", "2147483647"],
        hostname="pod-b",
        host_id_base=pod.id_base,
        security=sandbox.sandbox_security(runtime_default()),
        share_process_namespace=True,
        cgroups_path=f"/{pod.cgroup_parent}/shared",
        sysctls={"net.ipv4.ip_unprivileged_port_start": "80"},
    )
    await shared.start(pod.work / "bundles" / "shared", config, pod.platform)
    namespaces = dict(await shared.container_namespaces(share_process_namespace=True))
    user = {"uid": 1000, "gid": 1000}
    _, server = await pod.run("web", "httpd -f -p 80 -h /tmp", namespaces=namespaces, process=user)
    _, looker = await pod.run(
        "looker",
        "for i in $(seq 50); do netstat -ltn | grep -q ':80 ' && break; sleep 0.1; done;"
        " ps -o pid,user,args; netstat -ltn; hostname; echo end-$((1 + 1))",
        namespaces=namespaces,
        process=user,
    )
    await wait_for(log_has(looker, "end-2"))  # not "done": ps shows the script itself
    text = looker.read_text()
    # one PID namespace: the sandbox is its pid 1, the other container's server is seen
    assert re.search(r"^\s*1 \S+\s+/bin/sleep 2147483647$", text, re.MULTILINE), text
    assert "httpd -f -p 80" in text
    # a non-root user listens on port 80 in the pod's network namespace
    assert re.search(r":80\s.*LISTEN", text), text
    assert "pod-b" in text
    assert server.read_text() == ""
    # the sysctl is the pod's, not the host's
    assert Path("/proc/sys/net/ipv4/ip_unprivileged_port_start").read_text().strip() != "80"


async def test_exec_into_a_running_container_prints_its_output(pod: RuncPod) -> None:
    await pod.run("app", SLEEP)
    process = spec.process(
        spec.Process(args=["/bin/sh", "-c", "hostname; id -u; cat"], env={"PATH": "/bin"}),
    )
    result = await pod.runc.exec_output("app", process, stdin=b"from stdin\n")
    assert result.code == 0
    assert result.stdout == b"pod-a\n0\nfrom stdin\n"
    failing = spec.process(spec.Process(args=["/bin/sh", "-c", "echo oops >&2; exit 3"]))
    result = await pod.runc.exec_output("app", failing)
    assert (result.code, result.stderr) == (3, b"oops\n")
    with pytest.raises(runc.RuncError, match="no such file"):
        await pod.runc.exec_output("app", spec.process(spec.Process(args=["/nothing"])))


async def test_exec_with_a_terminal_hands_its_master_side_over(pod: RuncPod) -> None:
    await pod.run("app", SLEEP)
    process = spec.process(
        spec.Process(
            args=["/bin/sh", "-c", "tty; read line; echo got-$line"],
            env={"PATH": "/bin", "TERM": "xterm"},
            terminal=True,
        )
    )
    pid_file = pod.work / "exec.pid"
    async with console.ConsoleSocket(pod.work / "console.sock") as socket:
        started = asyncio.create_task(
            pod.runc.exec("app", process, console_socket=socket.path, pid_file=pid_file)
        )
        master = await socket.receive()
        assert await started == 0
    try:
        assert int(pid_file.read_text()) in await pod.runc.ps("app")
        os.write(master, b"typed\n")
        output = await asyncio.to_thread(_read_terminal, master)
    finally:
        os.close(master)
    assert b"/dev/pts/" in output
    assert b"got-typed" in output


async def test_a_tty_container_gets_its_terminal_through_the_console_socket(
    pod: RuncPod,
) -> None:
    namespaces = dict(await pod.sandbox.container_namespaces())
    container = pod.container(
        ["/bin/sh", "-c", "tty; read line; echo got-$line"],
        namespaces,
        process={"terminal": True},
    )
    runc.write_bundle(pod.work / "tty", spec.generate(container, pod.platform))
    async with console.ConsoleSocket(pod.work / "tty.sock") as socket:
        started = asyncio.create_task(
            pod.runc.run_detached("tty", pod.work / "tty", console_socket=socket.path)
        )
        master = await socket.receive()
        state = await started
    try:
        assert state.status == "running"
        os.write(master, b"attached\n")
        output = await asyncio.to_thread(_read_terminal, master)
    finally:
        os.close(master)
    assert b"/dev/pts/0" in output
    assert b"got-attached" in output


async def test_kill_and_delete_leave_no_process_cgroup_or_state(pod: RuncPod) -> None:
    state, _ = await pod.run("app", SLEEP)
    dirs = list(cgroup_dirs(state.pid).values())
    assert dirs and all(pod.cgroup_parent in str(d) for d in dirs)
    await pod.runc.kill("app", "KILL")
    await wait_for(lambda: not pid_alive(state.pid) or _is_zombie(state.pid))
    assert (await pod.runc.state("app")).status == "stopped"
    await pod.runc.delete("app")
    assert "app" not in [s.id for s in await pod.runc.containers()]
    assert not (pod.runc.root / "app").exists()
    assert [d for d in dirs if d.exists()] == []
    with pytest.raises(runc.ContainerNotFound):
        await pod.runc.state("app")


async def test_the_sandbox_stops_and_is_removed(pod: RuncPod) -> None:
    paths = await pod.sandbox.namespaces()
    holder = int(paths["network"].split("/")[2])
    await pod.sandbox.stop()
    await wait_for(lambda: not pid_alive(holder) or _is_zombie(holder))
    with pytest.raises(sandbox.SandboxNotRunning):
        await pod.sandbox.namespaces()
    await pod.sandbox.remove()
    with pytest.raises(runc.ContainerNotFound):
        await pod.sandbox.namespaces()
    assert [s.id for s in await pod.runc.containers()] == []


async def test_set_uid_works_unless_privilege_escalation_is_false(pod: RuncPod) -> None:
    su = pod.rootfs / "bin" / "su"
    su.unlink()
    su.write_bytes((pod.rootfs / "bin" / "busybox").read_bytes())
    os.chown(su, pod.id_base, pod.id_base)  # the pod's root
    su.chmod(0o755 | stat.S_ISUID)
    # By its path: busybox's sh runs applets by name from its own (plain) binary.
    script = "/bin/su -c 'id -u' root; echo done"
    user = {"uid": 1000, "gid": 1000}
    _, escalating = await pod.run("escalating", script, process=user)
    no_escalation = spec.Security(allow_privilege_escalation=False, seccomp=runtime_default())
    _, confined = await pod.run("confined", script, process=user, security=no_escalation)
    await wait_for(log_has(escalating, "done"))
    await wait_for(log_has(confined, "done"))
    assert escalating.read_text().split("\n")[0] == "0"
    assert confined.read_text().split("\n")[0] == "su: must be suid to work properly"


async def test_a_new_wrapper_adopts_running_containers(pod: RuncPod) -> None:
    state, log = await pod.run("app", "while true; do echo tick; sleep 0.1; done")
    first = weakref.ref(pod.runc)
    namespaces = await pod.sandbox.namespaces()
    # vkpy restarted: new objects on the same root, by the same ids
    pod.runc = runc.Runc(pod.runc.root)
    pod.sandbox = sandbox.PodSandbox(pod.runc, pod.sandbox.id)
    gc.collect()
    assert first() is None
    assert await pod.sandbox.namespaces() == namespaces
    await wait_for(log_has(log, "tick"))
    size = log.stat().st_size
    await wait_for(lambda: log.stat().st_size > size)  # still logging, no one in the pipe
    adopted = pod.runc
    states = {s.id: s for s in await adopted.containers()}
    assert states["app"].status == "running" and states["app"].pid == state.pid
    result = await adopted.exec_output("app", spec.process(spec.Process(args=["/bin/echo", "hi"])))
    assert result.stdout == b"hi\n"
    assert state.pid in await adopted.ps("app")
    await adopted.delete("app", force=True)
    assert "app" not in [s.id for s in await adopted.containers()]
    await wait_for(lambda: not pid_alive(state.pid) or _is_zombie(state.pid))


async def test_runc_errors_are_typed_with_runcs_message(pod: RuncPod) -> None:
    with pytest.raises(runc.ContainerNotFound, match="does not exist"):
        await pod.runc.state("nothing")
    await pod.run("app", SLEEP)
    with pytest.raises(runc.ContainerExists):
        await pod.run("app", SLEEP)
    namespaces = dict(await pod.sandbox.container_namespaces())
    broken = pod.container(["/nothing"], namespaces)
    runc.write_bundle(pod.work / "broken", spec.generate(broken, pod.platform))
    with pytest.raises(runc.RuncError, match="/nothing"):
        await pod.runc.run_detached("broken", pod.work / "broken")
    assert "broken" not in [s.id for s in await pod.runc.containers()]


def _is_zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except (OSError, IndexError):
        return True


def _read_terminal(master: int) -> bytes:
    """Everything the terminal shows until its last process closed it."""
    out = b""
    while True:
        try:
            chunk = os.read(master, 4096)
        except OSError:  # EIO: the other side is closed
            return out
        if not chunk:
            return out
        out += chunk
