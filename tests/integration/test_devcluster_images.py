"""The images the dev cluster builds and serves (vkpy/devcluster/images, registry.py),
as a node would see them: pulled by their public names through the mirrors setting
from a real docker-registry, unpacked with the pod's id map, run by the real runc.

Builds every image once (cached in ~/.cache/vkpy/images; the first build takes about
two minutes: mmdebstrap for nginx and vkpy), as root (mmdebstrap, runc, id maps).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import secrets
import subprocess
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

import vkpy
from tests.integration.oci.pods import host_platform, remove_work, runtime_default, wait_for
from tests.registry import Registry
from vkpy.devcluster import images, registry
from vkpy.oci.images import registries
from vkpy.oci.images.container import command_line
from vkpy.oci.images.pull import Puller
from vkpy.oci.images.store import ImageStore
from vkpy.oci.images.unpack import IdMap, unpack
from vkpy.oci.runtime import runc, spec

pytestmark = [
    pytest.mark.skipif(
        os.geteuid() != 0, reason="mmdebstrap, runc and id-mapped unpacking need root here"
    ),
    pytest.mark.timeout(900),
]

NGINX = "nginx:alpine"  # the getting-started pod's image, as its manifest names it


@dataclass
class Served:
    registry: Registry
    built: list[images.Built]
    conf: Path  # containers-registries.conf(5): the local registry as the mirror

    def by_name(self, name: str) -> images.Built:
        return next(b for b in self.built if b.image.name == name)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    built = images.build()
    running = Registry(tmp_path_factory.mktemp("registry")).start()
    try:
        for image in built:
            registry.push(running.host, image)
        conf = running.root / "registries.conf"
        conf.write_text(registry.registries_conf(registry.mirrors_setting(running.host)))
        yield Served(running, built, conf)
    finally:
        running.stop()


def test_every_image_is_served_by_its_public_names_through_the_mirror(served: Served) -> None:
    served_names = {r for b in served.built for r in b.image.references}
    assert {
        "docker.io/library/busybox:latest",
        "registry.k8s.io/pause:3.10",
        "registry.k8s.io/e2e-test-images/agnhost:2.53",
        "docker.io/library/nginx:alpine",
        "docker.io/library/nginx:latest",
        f"docker.io/library/vkpy:{vkpy.__version__}",
    } <= served_names
    for built in served.built:
        for reference in built.image.references:
            inspected = subprocess.run(
                ["skopeo", "inspect", "--no-tags", "--registries-conf", str(served.conf),
                 f"docker://{reference}"],
                capture_output=True, text=True, check=False,
            )  # fmt: skip
            assert inspected.returncode == 0, f"{reference}: {inspected.stderr}"
            facts = json.loads(inspected.stdout)
            assert facts["Digest"] == built.digest, reference
            assert (facts["Os"], facts["Architecture"]) == ("linux", "amd64")
    # They came from the local registry, stored below the public registry's name.
    requests = served.registry.requests()
    assert "HEAD /v2/registry.k8s.io/pause/manifests/3.10" in requests or any(
        r.startswith("GET /v2/registry.k8s.io/pause/manifests/3.10") for r in requests
    )
    assert any(r.startswith("GET /v2/docker.io/library/nginx/manifests/alpine") for r in requests)


def test_a_second_build_rebuilds_nothing(served: Served) -> None:
    stamps = {b.image.name: (b.layout / "index.json").stat().st_mtime_ns for b in served.built}
    again = images.build()
    assert [b.layout for b in again] == [b.layout for b in served.built]
    assert [b.digest for b in again] == [b.digest for b in served.built]
    for built in again:
        assert (built.layout / "index.json").stat().st_mtime_ns == stamps[built.image.name]
        assert built.seconds < 2.0, f"{built.image.name} took {built.seconds:.1f} s"


class ImageRun:
    """Pull an image by its public name through the mirror (vkpy/oci/images), unpack it
    with a pod's id map and run it with runc in new user, mount, PID, network, IPC
    and UTS namespaces, its output in a file."""

    def __init__(self, work: Path, served: Served) -> None:
        self.work = work
        hosts = registries.from_config(registry.mirrors_setting(served.registry.host))
        self.store = ImageStore(work / "store")
        self.puller = Puller(self.store, hosts)
        self.runc = runc.Runc(work / "runc")
        self.id_base = 0x10000 * (300 + secrets.randbelow(200))
        self.ids: list[str] = []

    async def start(
        self, image: str, command: list[str] | None = None, uid: int | None = None
    ) -> tuple[runc.State, Path]:
        pulled = await self.puller.ensure(image)
        name = f"img-{secrets.token_hex(4)}"
        rootfs = await unpack(
            self.store, image, self.work / name / "rootfs", IdMap(0, self.id_base, 65536)
        )
        config = self.store.config(str(pulled.ref))
        user = config.user.split(":")
        mapping = spec.pod_mapping(self.id_base)
        container = spec.Container(
            process=spec.Process(
                args=command_line(config, command or [], []),
                env=dict(e.split("=", 1) for e in config.env),
                cwd=config.working_dir or "/",
                uid=uid if uid is not None else int(user[0] or 0),
                gid=int(user[-1] or 0),
            ),
            rootfs=str(rootfs),
            hostname=name,
            namespaces=dict.fromkeys(("user", "pid", "network", "ipc", "uts")),
            uid_mappings=mapping,
            gid_mappings=mapping,
            security=spec.Security(seccomp=runtime_default()),
        )
        bundle = self.work / name / "bundle"
        runc.write_bundle(bundle, spec.generate(container, host_platform()))
        log = self.work / name / "output.log"
        log.touch()
        # The pod's root owns its output file, so that a program reopening its stdout
        # by name (/dev/stdout: nginx's logs, as in the official image) may.
        os.chown(log, self.id_base, self.id_base)
        with log.open("wb") as out:
            state = await self.runc.run_detached(name, bundle, stdout=out, stderr=out)
        self.ids.append(name)
        return state, log

    async def stopped(self, name: str, timeout: float = 60.0) -> None:
        """Wait until the container's process has exited (generous: a loaded machine)."""
        deadline = time.monotonic() + timeout
        while (await self.runc.state(name)).status != "stopped":
            assert time.monotonic() < deadline, f"{name} still runs after {timeout:g} s"
            await asyncio.sleep(0.1)

    async def cleanup(self) -> None:
        for name in self.ids:
            with contextlib.suppress(runc.RuncError, FileNotFoundError):
                await self.runc.delete(name, force=True)


@pytest.fixture
async def image_run(served: Served) -> AsyncIterator[ImageRun]:
    # Not tmp_path: its parents are mode 0700, and the pod's root (a mapped id) must
    # be able to reach its root filesystem.
    work = Path(tempfile.mkdtemp(prefix="vkpy-images-"))
    work.chmod(0o711)
    made = ImageRun(work, served)
    try:
        yield made
    finally:
        await made.cleanup()
        remove_work(work)


def in_netns(pid: int, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["nsenter", f"--net=/proc/{pid}/ns/net", *argv],
        capture_output=True, text=True, check=False, timeout=10,
    )  # fmt: skip


async def test_the_nginx_image_serves_real_nginx_on_port_80(image_run: ImageRun) -> None:
    state, log = await image_run.start(NGINX)
    assert in_netns(state.pid, "ip", "link", "set", "lo", "up").returncode == 0
    got: list[subprocess.CompletedProcess[str]] = []

    def answered() -> bool:
        got.append(in_netns(state.pid, "/bin/busybox", "wget", "-S", "-O-", "http://127.0.0.1:80/"))
        return got[-1].returncode == 0

    await wait_for(answered, timeout=20)
    headers, page = got[-1].stderr, got[-1].stdout
    assert "HTTP/1.1 200 OK" in headers
    assert "Server: nginx/1." in headers, headers
    assert "Welcome to nginx!" in page
    # Its access log goes to the container's stdout, as the official image's does.
    await wait_for(lambda: '"GET / HTTP/1.1" 200' in log.read_text())
    # The master runs as the pod's root, which the host sees as the mapped id.
    status = Path(f"/proc/{state.pid}/status").read_text()
    uid_line = next(line for line in status.splitlines() if line.startswith("Uid:"))
    assert uid_line.split()[1] == str(image_run.id_base)


async def test_busybox_runs_its_shell(image_run: ImageRun) -> None:
    state, log = await image_run.start("busybox", ["sh", "-c", "echo hello from busybox; id -u"])
    await image_run.stopped(state.id)
    assert log.read_text() == "hello from busybox\n0\n"


async def test_pause_waits_until_told_to_stop(image_run: ImageRun) -> None:
    state, log = await image_run.start("registry.k8s.io/pause:3.10")
    await asyncio.sleep(0.5)
    assert (await image_run.runc.state(state.id)).status == "running"
    # It runs as 65535 in the pod, as upstream's image does.
    status = Path(f"/proc/{state.pid}/status").read_text()
    uid_line = next(line for line in status.splitlines() if line.startswith("Uid:"))
    assert uid_line.split()[1] == str(image_run.id_base + 65535)
    await image_run.runc.kill(state.id, "TERM")
    await image_run.stopped(state.id)
    assert "pause: shutting down on signal 15" in log.read_text()


async def test_agnhost_runs_its_default_command(image_run: ImageRun) -> None:
    _, log = await image_run.start("registry.k8s.io/e2e-test-images/agnhost:2.53")
    await wait_for(lambda: "Paused" in log.read_text(), timeout=60)


async def test_agnhost_has_the_tools_the_suites_commands_use(image_run: ImageRun) -> None:
    """The networking specs dial with curl, hooks and probes call curl, nc and
    netstat (a busybox applet upstream): the image has them, as upstream's does."""
    script = "for tool in curl nc ss nslookup iperf bash wget netstat; do command -v $tool; done"
    image = "registry.k8s.io/e2e-test-images/agnhost:2.63.0"
    state, log = await image_run.start(image, ["sh", "-c", script])
    await image_run.stopped(state.id)
    found = [Path(line).name for line in log.read_text().splitlines()]
    assert found == ["curl", "nc", "ss", "nslookup", "iperf", "bash", "wget", "netstat"], found


async def test_glibc_dns_testing_has_glibcs_hostname_and_dig(image_run: ImageRun) -> None:
    """The suite's hostname specs run `hostname -f` in it; its DNS specs dig."""
    image = "registry.k8s.io/e2e-test-images/glibc-dns-testing:2.0.0"
    state, log = await image_run.start(
        image, ["sh", "-c", "hostname; command -v dig; ldd --version"]
    )
    await image_run.stopped(state.id)
    lines = log.read_text().splitlines()
    assert lines[0].startswith("img-")  # the UTS namespace's name (ImageRun's)
    assert lines[1].endswith("/dig")
    assert "GLIBC" in lines[2] or "GNU libc" in lines[2], lines


async def test_the_vkpy_image_runs_vkpy(image_run: ImageRun) -> None:
    image = f"vkpy:{vkpy.__version__}"
    state, log = await image_run.start(image, ["python", "-m", "vkpy", "--version"])
    await image_run.stopped(state.id)
    assert vkpy.__version__ in log.read_text()
    state, log = await image_run.start(image, ["id"])
    await image_run.stopped(state.id)
    assert log.read_text().startswith("uid=10001(vkpy) gid=10001(vkpy)")
