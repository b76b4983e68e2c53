"""busybox: upstream's busybox 1.35.0, built here from its release source, as an OCI
image (docker.io/library/busybox).

The smallest image that is a real one: /bin/busybox and a link per applet, an
/etc/passwd and /etc/group with root and nobody, CMD ["sh"]. The nonroot and
nonewprivs images are built on top of it. A `variant` adds /etc/variant so tests
get a second, different image (its own layer and digest) at no cost.

Why upstream's source and not Debian's busybox-static: Debian reverts upstream's
"ash: retain envvars with bad names in initial environment" (9c143ce52), so its `sh`
drops every variable whose name is no shell identifier before running a program.
A pod's `envFrom` makes such names of a ConfigMap's or Secret's keys (`data-1`), and
the conformance specs "... should be consumable via the environment" run `sh -c env`
in busybox and look for them; Docker's and Kubernetes' busybox images are upstream's
and keep them.

The binary: upstream's release tarball, as Debian's archive serves it unchanged (the
orig tarball, from the mirror debian.py uses, or `$VKPY_BUSYBOX_SOURCE`: a URL or a
local file), refused unless its sha256 is the pinned one; unpacked with tarfile,
`make defconfig`, CONFIG_STATIC=y, `make` (about 30 s on 2 cores). It is cached
beside the images (`<cache>/busybox-1.35.0-<hash of the tarball and recipe>/busybox`,
built once per machine, as an image is: in a temporary directory renamed into place,
under a lock).

When it cannot be built here, because the source cannot be fetched (no network to
the mirror) or gcc, make or the static C library is missing, the image is made of
Debian's /bin/busybox as before, with one warning saying what differs and what to
install. Failing instead would take away every image built on busybox (the tests'
registry, nonroot, nonewprivs, the dev cluster's `busybox`) over a difference that
only those env names show. A tarball whose sha256 differs, or a build that fails with
everything present, is an error (ImageBuildError): a wrong mirror or a broken
recipe, not a missing prerequisite, and not to be hidden.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import os
import shutil
import tarfile
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from . import debian
from .build import (
    ImageBuildError,
    ImageConfig,
    ImageUnavailable,
    built_once,
    cache_dir,
    cached,
    layout_from_rootfs,
    recipe_key,
    run,
    run_with_progress,
)

log = logging.getLogger("vkpy.devcluster.images")

VERSION = "1.35.0"
TARBALL = f"busybox_{VERSION}.orig.tar.bz2"
"""Upstream's busybox-1.35.0.tar.bz2, unchanged, under the name Debian's archive gives it."""
SHA256 = "faeeb244c35a348a334f4a59e44626ee870fb07b6884d68c10ae8bc19f83a694"
SOURCE_ENV = "VKPY_BUSYBOX_SOURCE"
#: How the binary is built from the tarball; bump when _compile changes.
BUILD_RECIPE = "1: make defconfig, CONFIG_STATIC=y, make"
BUSYBOX = Path("/bin/busybox")  # Debian's busybox-static: the fallback
#: Bump when the image's build below changes, so cached images are rebuilt.
RECIPE = "3"
CONFIG = ImageConfig(cmd=("sh",), env=("PATH=/bin",), working_dir="/")
DOWNLOAD_TIMEOUT = 60.0


@dataclass(frozen=True)
class Binary:
    path: Path
    upstream: bool  # built from upstream's source, or Debian's busybox-static


def source() -> str:
    """Where the tarball comes from: `$VKPY_BUSYBOX_SOURCE` (a URL or a file), or the
    Debian mirror's pool."""
    return os.environ.get(SOURCE_ENV) or f"{debian.mirror()}/pool/main/b/busybox/{TARBALL}"


def binary() -> Binary:
    """The busybox binary the image is made of: upstream's, built once per machine, or
    Debian's when it cannot be built here (warned about once per process)."""
    return _binary(source(), cache_dir())


@functools.cache
def _binary(where: str, cache: Path) -> Binary:
    dest = cache / f"busybox-{VERSION}-{recipe_key(SHA256, BUILD_RECIPE)}"
    if not (dest / "busybox").exists():
        missing = _missing_tools()
        if missing:
            return _fallback(f"no {' and no '.join(missing)}")
        try:
            built_once(dest, "busybox", lambda out: _build(where, out), f"busybox {VERSION}")
        except SourceUnavailable as e:
            return _fallback(str(e))
    return Binary(dest / "busybox", upstream=True)


class SourceUnavailable(Exception):
    """The tarball could not be had (no network to the mirror, no such file)."""


def _missing_tools() -> list[str]:
    missing = [tool for tool in ("gcc", "make") if shutil.which(tool) is None]
    if not missing:
        libc = run("gcc", "-print-file-name=libc.a").strip()
        if not os.path.isabs(libc) or not os.path.exists(libc):
            missing.append("static C library (libc.a)")
    return missing


def _fallback(why: str) -> Binary:
    if not BUSYBOX.exists():
        raise ImageUnavailable(
            f"busybox {VERSION} cannot be built here ({why}) and there is no {BUSYBOX}: "
            "install gcc, make and libc6-dev, or busybox-static (`make system-deps`)"
        )
    log.warning(
        "busybox image: upstream's busybox %s cannot be built here (%s), so it is Debian's "
        "%s, whose sh drops environment variables whose names are not shell identifiers "
        "(envFrom's `data-1`): they do not reach the programs sh runs (`sh -c env`). "
        "For upstream's: install gcc, make and libc6-dev (`make system-deps`) and let this "
        "machine reach %s, or set %s to a copy of %s (sha256 %s)",
        VERSION,
        why,
        BUSYBOX,
        source(),
        SOURCE_ENV,
        TARBALL,
        SHA256,
    )
    return Binary(BUSYBOX, upstream=False)


def _build(where: str, out: Path) -> None:
    """Fetch and check the tarball, build a static busybox, put it at `out/busybox`."""
    scratch = out.parent
    tarball = scratch / TARBALL
    _fetch(where, tarball)
    with tarfile.open(tarball, "r:bz2") as tar:
        tar.extractall(scratch / "src", filter="data")
    [tree] = (scratch / "src").iterdir()
    _compile(tree)
    out.mkdir()
    shutil.copy2(tree / "busybox", out / "busybox")


def _fetch(where: str, dest: Path) -> None:
    """Copy the tarball from a URL or a file to `dest`; ImageBuildError (and no file)
    unless its sha256 is SHA256."""
    log.info("  busybox: fetching %s", where)
    digest = hashlib.sha256()
    url = where if urllib.parse.urlsplit(where).scheme else Path(where).resolve().as_uri()
    try:
        # Any URL: what it serves is checked against the pinned sha256 below.
        with (
            urllib.request.urlopen(url, timeout=DOWNLOAD_TIMEOUT) as got,  # noqa: S310
            dest.open("wb") as out,
        ):
            while chunk := got.read(1 << 16):
                digest.update(chunk)
                out.write(chunk)
    except (urllib.error.URLError, OSError) as e:
        dest.unlink(missing_ok=True)
        raise SourceUnavailable(f"{where}: {getattr(e, 'reason', e)}") from e
    if digest.hexdigest() != SHA256:
        dest.unlink()
        raise ImageBuildError(
            f"busybox source {where}: sha256 {digest.hexdigest()}, not {SHA256} "
            f"(upstream's busybox-{VERSION}.tar.bz2): refused"
        )


def _compile(tree: Path) -> None:
    cpus = len(os.sched_getaffinity(0))
    # Not a make's sub-make when `make images` runs this (its jobserver is not ours).
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}
    run_with_progress("busybox defconfig", ["make", "-C", tree, "defconfig"], env=env)
    config = tree / ".config"
    text = config.read_text()
    if "# CONFIG_STATIC is not set\n" not in text:
        raise ImageBuildError(f"busybox {VERSION}: defconfig has no CONFIG_STATIC line")
    config.write_text(text.replace("# CONFIG_STATIC is not set\n", "CONFIG_STATIC=y\n"))
    log.info("  busybox: compiling %s with %d jobs (about 30 s)", VERSION, cpus)
    run_with_progress("busybox make", ["make", "-C", tree, f"-j{cpus}"], env=env)


def _fill(rootfs: Path, busybox: Path, variant: str) -> None:
    for sub in ("bin", "etc", "tmp", "root", "home"):
        (rootfs / sub).mkdir(exist_ok=True)
    shutil.copy2(busybox, rootfs / "bin/busybox")
    for applet in run(busybox, "--list").split():
        if applet != "busybox":
            (rootfs / "bin" / applet).symlink_to("busybox")
    (rootfs / "etc/passwd").write_text(
        "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/home:/bin/false\n"
    )
    (rootfs / "etc/group").write_text("root:x:0:\nnogroup:x:65534:\n")
    if variant:
        (rootfs / "etc/variant").write_text(variant + "\n")


def busybox(variant: str = "") -> Path:
    """The busybox image's OCI layout (tag `latest`), built once per busybox binary."""
    made_of = binary().path
    key = hashlib.sha256(made_of.read_bytes() + f"{RECIPE}:{variant}".encode()).hexdigest()[:16]

    def build(layout: Path) -> None:
        layout_from_rootfs(layout, lambda rootfs: _fill(rootfs, made_of, variant), CONFIG)

    return cached("busybox", key, build)
