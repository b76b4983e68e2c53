"""A real image registry and real images for tests, with nothing from the internet.

Images are built here from upstream's busybox (compiled from its release source, or
Debian's busybox-static when that cannot be done here) with umoci (init, new, unpack,
repack, config) by vkpy/devcluster/images (the dev cluster serves the same ones) and
kept outside the checkout (~/.cache/vkpy/images/, or $VKPY_IMAGE_CACHE), keyed by
the busybox binary and the recipe, so a second run builds nothing; the variants
below (a whiteout, two platforms) are the tests' own. The registry is Debian's
docker-registry (distribution 2.8) serving plain HTTP on a free loopback port,
optionally behind htpasswd (bcrypt) basic auth; images are pushed to it with skopeo.
Its access log says which requests reached it.

Needs skopeo, umoci, docker-registry, busybox-static, apache2-utils (htpasswd), gcc,
make and libc6-dev: `make system-deps`.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from vkpy.devcluster.images.build import cache_dir
from vkpy.devcluster.images.busybox import BUSYBOX, RECIPE
from vkpy.devcluster.images.busybox import busybox as images_busybox
from vkpy.devcluster.images.pause import pause as images_pause
from vkpy.devcluster.registry import config_text

__all__ = [
    "BUSYBOX",
    "RECIPE",
    "Registry",
    "busybox_layout",
    "cache_dir",
    "free_port",
    "pause_layout",
]
TOOLS = ("skopeo", "umoci", "docker-registry", "htpasswd")


def require_tools() -> None:
    missing = [tool for tool in TOOLS if shutil.which(tool) is None]
    if not BUSYBOX.exists():
        missing.append(str(BUSYBOX))
    if missing:
        raise RuntimeError(f"missing {', '.join(missing)}: run `make system-deps` (as root)")


def _run(*argv: str | Path) -> str:
    result = subprocess.run([str(a) for a in argv], capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(map(str, argv))}: {result.stderr.strip()}")
    return result.stdout


def busybox_layout(variant: str = "") -> Path:
    """An OCI image layout holding one busybox image, tag `latest`: /bin/busybox and
    its applets, an /etc/passwd, CMD ["sh"]. A `variant` adds /etc/variant with that
    text, so each variant is a different image (its own layer and digest). Built by
    vkpy/devcluster/images/busybox.py, which the dev cluster's registry serves too."""
    require_tools()
    return images_busybox(variant)


def pause_layout() -> Path:
    """The pause image's OCI layout (built by vkpy/devcluster/images/pause.py)."""
    require_tools()
    return images_pause()


def busybox_layout_without(path: str) -> Path:
    """The busybox image with a second layer that deletes `path` (an OCI whiteout)."""
    require_tools()
    base = busybox_layout()
    key = hashlib.sha256(f"{base.name}:{RECIPE}:without:{path}".encode()).hexdigest()[:16]
    dest = cache_dir() / f"busybox-without-{key}"
    if (dest / "index.json").exists():
        return dest
    work = Path(tempfile.mkdtemp(prefix="build-", dir=dest.parent))
    try:
        layout, bundle = work / "layout", work / "bundle"
        shutil.copytree(base, layout, symlinks=True)
        _run("umoci", "unpack", *_rootless(), "--image", f"{layout}:latest", bundle)
        (bundle / "rootfs" / path).unlink()
        _run("umoci", "repack", "--image", f"{layout}:latest", bundle)
        _run("umoci", "gc", "--layout", layout)
        os.rename(layout, dest)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return dest


def multi_arch_layout(amd64: Path, arm64: Path) -> Path:
    """An OCI layout whose `latest` is an image index of two platforms: `amd64`'s image
    as linux/amd64 and `arm64`'s, its config relabelled, as linux/arm64."""
    require_tools()
    key = hashlib.sha256(f"{amd64.name}:{arm64.name}:{RECIPE}:multi".encode()).hexdigest()[:16]
    dest = cache_dir() / f"multi-arch-{key}"
    if (dest / "index.json").exists():
        return dest
    work = Path(tempfile.mkdtemp(prefix="build-", dir=dest.parent))
    try:
        layout = work / "layout"
        shutil.copytree(arm64, layout, symlinks=True)
        _run("umoci", "config", "--image", f"{layout}:latest", "--architecture", "arm64")
        _run(
            "skopeo", "--insecure-policy", "copy", "--quiet",
            f"oci:{amd64}:latest", f"oci:{layout}:amd64",
        )  # fmt: skip
        entries = json.loads((layout / "index.json").read_text())["manifests"]
        by_tag = {e["annotations"]["org.opencontainers.image.ref.name"]: e for e in entries}
        manifests = []
        for tag, arch in (("amd64", "amd64"), ("latest", "arm64")):
            entry = {k: by_tag[tag][k] for k in ("mediaType", "digest", "size")}
            manifests.append({**entry, "platform": {"architecture": arch, "os": "linux"}})
        index = json.dumps(
            {
                "schemaVersion": 2,
                "mediaType": "application/vnd.oci.image.index.v1+json",
                "manifests": manifests,
            }
        ).encode()
        digest = hashlib.sha256(index).hexdigest()
        (layout / "blobs/sha256" / digest).write_bytes(index)
        top = {
            "mediaType": "application/vnd.oci.image.index.v1+json",
            "digest": f"sha256:{digest}",
            "size": len(index),
            "annotations": {"org.opencontainers.image.ref.name": "latest"},
        }
        (layout / "index.json").write_text(json.dumps({"schemaVersion": 2, "manifests": [top]}))
        os.rename(layout, dest)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return dest


def _rootless() -> list[str]:
    return [] if os.geteuid() == 0 else ["--rootless"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Registry:
    """A running docker-registry: `host` is `127.0.0.1:PORT`."""

    root: Path
    user: str | None = None
    password: str | None = field(default=None, repr=False)
    host: str = ""
    _process: subprocess.Popen[bytes] | None = None

    def start(self) -> Registry:
        require_tools()
        self.root.mkdir(parents=True, exist_ok=True)
        self.host = f"127.0.0.1:{free_port()}"
        htpasswd = None
        if self.user is not None:
            hashed = _run("htpasswd", "-Bbn", self.user, self.password or "")
            htpasswd = self.root / "htpasswd"
            htpasswd.write_text(hashed)
        (self.root / "config.yml").write_text(config_text(self.root, self.host, htpasswd))
        log = open(self.root / "registry.log", "wb")  # noqa: SIM115 - the process keeps it
        self._process = subprocess.Popen(
            ["docker-registry", "serve", str(self.root / "config.yml")],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        log.close()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                urllib.request.urlopen(f"http://{self.host}/v2/", timeout=1)
                return self
            except urllib.error.HTTPError:
                return self  # 401: up, and asking for credentials
            except OSError:
                if self._process.poll() is not None:
                    raise RuntimeError(f"docker-registry exited: {self.log()}") from None
                time.sleep(0.05)
        raise RuntimeError(f"docker-registry did not answer on {self.host}: {self.log()}")

    def stop(self) -> None:
        if self._process is not None and self._process.poll() is None:
            self._process.terminate()
            self._process.wait(10)

    def log(self) -> str:
        return (self.root / "registry.log").read_text(errors="replace")

    def requests(self) -> list[str]:
        """The access log's request lines, e.g. `GET /v2/library/busybox/manifests/1`."""
        found = []
        for line in self.log().splitlines():
            if '] "' in line and "/v2/" in line:
                found.append(line.split('] "', 1)[1].split(" HTTP/", 1)[0])
        return found

    def push(self, layout: Path, repository_tag: str) -> str:
        """Push the layout's `latest` (every platform of an index) as
        `<host>/<repository_tag>`; its manifest (or index) digest."""
        digest_file = self.root / "pushed.digest"
        creds = ["--dest-creds", f"{self.user}:{self.password}"] if self.user else []
        _run(
            "skopeo", "--insecure-policy", "copy", "--all", "--dest-tls-verify=false", *creds,
            "--digestfile", digest_file, f"oci:{layout}:latest",
            f"docker://{self.host}/{repository_tag}",
        )  # fmt: skip
        return digest_file.read_text().strip()

    def serve_pause(self) -> dict[str, object]:
        """Serve the pause image (vkpy/devcluster/images/pause.py, as the dev cluster's
        registry does) as `pause:3.10`; the node's `registries` settings that make
        this registry plain HTTP and the mirror of registry.k8s.io, so a node's
        default sandbox image, registry.k8s.io/pause:3.10, is pulled from here."""
        self.push(pause_layout(), "pause:3.10")
        return {
            self.host: {"insecure": True},
            "registry.k8s.io": {"mirrors": [f"http://{self.host}"]},
        }

    def blob_file(self, digest: str) -> Path:
        """Where the registry keeps a blob's bytes (to corrupt it on purpose)."""
        hexdigest = digest.removeprefix("sha256:")
        return self.root / f"data/docker/registry/v2/blobs/sha256/{hexdigest[:2]}/{hexdigest}/data"
