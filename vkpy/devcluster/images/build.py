"""Turning a root filesystem into a cached OCI image layout, with umoci.

Every image the dev cluster and the tests serve is built here from what the package
registries serve, never pulled from an image registry (this machine reaches none).
What is common to all of them lives in this module: where the cache is
(`~/.cache/vkpy/images/<name>-<hash of its recipe>`, or `$VKPY_IMAGE_CACHE`), a
build into a temporary directory renamed into place only when complete (so a killed
build leaves nothing that looks finished), one build at a time per image (a lock
file), progress lines for the long steps, and the umoci calls (init, new, unpack,
repack, config, gc) that make a layout of one image tagged `latest`.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

log = logging.getLogger("vkpy.devcluster.images")

TAG = "latest"
#: Seconds after which an unused older build of a `replaces_older` image is deleted.
STALE = 6 * 3600


class ImageBuildError(RuntimeError):
    """An image could not be built; the message says which step and why."""


class ImageUnavailable(ImageBuildError):
    """Something an image's build needs is missing here (root, Go): the dev cluster
    serves the other images and says what to do, rather than failing."""


def cache_dir() -> Path:
    return Path(os.environ.get("VKPY_IMAGE_CACHE", Path.home() / ".cache/vkpy/images"))


def run(*argv: str | Path) -> str:
    """Run a tool; its stdout, or ImageBuildError with its stderr."""
    result = subprocess.run([str(a) for a in argv], capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise ImageBuildError(f"{' '.join(map(str, argv))}: {result.stderr.strip()}")
    return result.stdout


def run_with_progress(
    what: str,
    argv: Sequence[str | Path],
    every: float = 10.0,
    env: dict[str, str] | None = None,
) -> None:
    """Run a long tool (no stdin; `env`, or this process's environment), logging its
    last output line every `every` seconds (and all of its output when it fails), so
    a cold build is never silent."""
    began = last = time.monotonic()
    lines: list[str] = []
    with subprocess.Popen(
        [str(a) for a in argv],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
    ) as process:
        assert process.stdout is not None
        for line in process.stdout:
            lines.append(line.rstrip())
            if time.monotonic() - last >= every:
                last = time.monotonic()
                log.info("  %s: %s (%.0f s)", what, line.strip()[:120], last - began)
    if process.returncode != 0:
        tail = "\n".join(lines[-30:])
        raise ImageBuildError(f"{what}: {argv[0]} exited {process.returncode}:\n{tail}")


def recipe_key(*parts: str | bytes) -> str:
    """16 hex digits of the hash of everything a build depends on."""
    digest = hashlib.sha256()
    for part in parts:
        digest.update(part.encode() if isinstance(part, str) else part)
        digest.update(b"\0")
    return digest.hexdigest()[:16]


def rootless() -> list[str]:
    return [] if os.geteuid() == 0 else ["--rootless"]


@dataclass(frozen=True)
class ImageConfig:
    """The OCI image config's fields this project's images set."""

    entrypoint: tuple[str, ...] = ()
    cmd: tuple[str, ...] = ()
    env: tuple[str, ...] = ("PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",)
    working_dir: str = "/"
    user: str = ""
    exposed_ports: tuple[str, ...] = ()
    stop_signal: str = ""
    labels: dict[str, str] = field(default_factory=dict)

    def umoci_args(self) -> list[str]:
        args: list[str] = []
        args += [f"--config.entrypoint={a}" for a in self.entrypoint]
        args += [f"--config.cmd={a}" for a in self.cmd]
        args += [f"--config.env={e}" for e in self.env]
        args += [f"--config.workingdir={self.working_dir}"]
        args += [f"--config.user={self.user}"] if self.user else []
        args += [f"--config.exposedports={p}" for p in self.exposed_ports]
        args += [f"--config.stopsignal={self.stop_signal}"] if self.stop_signal else []
        args += [f"--config.label={k}={v}" for k, v in self.labels.items()]
        return args


def cached(
    name: str, key: str, build: Callable[[Path], None], *, replaces_older: bool = False
) -> Path:
    """`<cache>/<name>-<key>`, an OCI layout that `build(layout)` makes the first time.

    `build` writes a complete layout into the directory it is given (a temporary one
    beside the destination, renamed into place when it returns). With
    `replaces_older`, the other `<name>-*` layouts not used for STALE seconds are
    deleted once it is built (an image rebuilt on every code change would otherwise
    fill the disk; checkouts sharing the cache keep theirs while they use them)."""
    dest = cache_dir() / f"{name}-{key}"
    if (dest / "index.json").exists():
        if replaces_older:
            os.utime(dest)  # in use: not stale for other checkouts sharing the cache
        return dest
    if built_once(dest, "index.json", build, f"image {name}") and replaces_older:
        for older in dest.parent.glob(f"{name}-*"):
            index = older / "index.json"
            if older != dest and index.exists() and time.time() - _used(older) > STALE:
                shutil.rmtree(older, ignore_errors=True)
                Path(f"{older}.lock").unlink(missing_ok=True)
    return dest


def built_once(dest: Path, done: str, build: Callable[[Path], None], what: str) -> bool:
    """Make the directory `dest` with `build(directory)` unless `dest/done` exists;
    whether it was built now. `build` fills a temporary directory beside `dest`
    (its parent is scratch space, deleted afterwards), renamed into place when it
    returns; one build at a time (a lock file beside it), a later one finds it."""
    if (dest / done).exists():
        return False
    dest.parent.mkdir(parents=True, exist_ok=True)
    with _locked(dest.parent / f"{dest.name}.lock"):
        if (dest / done).exists():
            return False  # another process built it while we waited
        work = Path(tempfile.mkdtemp(prefix=f"build-{dest.name}-", dir=dest.parent))
        try:
            began = time.monotonic()
            log.info("building %s into %s", what, dest)
            build(work / "out")
            os.rename(work / "out", dest)
            log.info("built %s in %.1f s", what, time.monotonic() - began)
        finally:
            remove_build_dir(work)
    return True


def _used(layout: Path) -> float:
    """When a layout was last built or found in the cache (its directory's mtime)."""
    return layout.stat().st_mtime


def remove_build_dir(work: Path) -> None:
    """Delete a build directory, first unmounting what an interrupted mmdebstrap left
    mounted in it (its root's /proc, /sys, /dev/pts), so that nothing but the build's
    own files is ever removed."""
    mounts = []
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/mountinfo").read_text().splitlines():
            point = line.split()[4].replace("\\040", " ")
            if Path(point).is_relative_to(work):
                mounts.append(point)
    for point in sorted(mounts, key=len, reverse=True):
        subprocess.run(["umount", "--lazy", point], capture_output=True, check=False)
    shutil.rmtree(work, ignore_errors=True)


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    with path.open("a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def layout_from_rootfs(layout: Path, fill: Callable[[Path], None], config: ImageConfig) -> None:
    """Make `layout` an OCI layout whose `latest` is one linux/amd64 image: an empty
    root filesystem that `fill(rootfs)` populates, one layer, then `config`."""
    bundle = layout.parent / "bundle"
    image = f"{layout}:{TAG}"
    run("umoci", "init", "--layout", layout)
    run("umoci", "new", "--image", image)
    run("umoci", "unpack", *rootless(), "--image", image, bundle)
    fill(bundle / "rootfs")
    run("umoci", "repack", "--image", image, bundle)
    run(
        "umoci", "config", "--image", image, *config.umoci_args(),
        "--architecture", "amd64", "--os", "linux",
    )  # fmt: skip
    run("umoci", "gc", "--layout", layout)
    shutil.rmtree(bundle, ignore_errors=True)


def layout_on_top(
    layout: Path, base: Path, fill: Callable[[Path], None], config: ImageConfig
) -> None:
    """Make `layout` `base`'s image with one more layer that `fill(rootfs)` writes
    (over a copy of base's root filesystem), then `config` applied."""
    bundle = layout.parent / "bundle"
    image = f"{layout}:{TAG}"
    shutil.copytree(base, layout, symlinks=True)
    run("umoci", "unpack", *rootless(), "--image", image, bundle)
    fill(bundle / "rootfs")
    run("umoci", "repack", "--image", image, bundle)
    run("umoci", "config", "--image", image, *config.umoci_args())
    run("umoci", "gc", "--layout", layout)
    shutil.rmtree(bundle, ignore_errors=True)


def manifest_digest(layout: Path) -> str:
    """The digest of the layout's `latest` (a manifest or an index)."""
    for entry in json.loads((layout / "index.json").read_text())["manifests"]:
        if entry.get("annotations", {}).get("org.opencontainers.image.ref.name") == TAG:
            return str(entry["digest"])
    raise ImageBuildError(f"{layout} has no image tagged {TAG}")


def size(layout: Path) -> int:
    """Bytes of the layout's blobs (what a registry stores for it)."""
    return sum(p.stat().st_size for p in (layout / "blobs").rglob("*") if p.is_file())
