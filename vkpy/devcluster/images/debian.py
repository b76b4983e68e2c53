"""Images with a minimal Debian root: nginx, python, and vkpy's own image for the chart.

`mmdebstrap --variant=essential` makes the smallest Debian root that dpkg can still
manage (the Essential packages, no apt) plus the packages an image needs, straight
from a Debian mirror (a package registry, which this machine may reach), without
documentation, manual pages or translations. umoci makes it an image. mmdebstrap
runs in its root mode here (files owned by their real ids, as in a real image), so
building these needs root; busybox, pause and agnhost do not.

- nginx: Debian's nginx-light, its logs to the container's stdout/stderr, CMD
  `nginx -g "daemon off;"`, port 80, stop signal SIGQUIT (as the official image);
  served as docker.io/library/nginx:alpine and :latest, so the getting-started pod
  gets a real nginx.
- python: Debian's python3 and python-is-python3, nothing else; CMD ["python3"].
- glibc-dns-testing: the conformance suite's glibc-based image for DNS and hostname
  specs (upstream's is a glibc distribution with DNS tools): the minimal root (glibc,
  `hostname`) with Debian's bind9-dnsutils (dig, nslookup).
- vkpy: the recipe of the repository's Dockerfile on Debian's python3 (3.11, the
  same minor version as the wheels built here): vkpy and its dependencies as wheels
  built by this checkout's pip, installed into /usr/local; user and group 10001,
  home /var/lib/vkpy, ENTRYPOINT ["python", "-m", "vkpy"].
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path

from vkpy.devcluster.binaries import REPO_ROOT

from .build import (
    ImageBuildError,
    ImageConfig,
    ImageUnavailable,
    cached,
    layout_from_rootfs,
    recipe_key,
    run,
    run_with_progress,
)

SUITE = "bookworm"
PYTHON = (3, 11)  # bookworm's python3
EXCLUDES = ("/usr/share/doc/*", "/usr/share/man/*", "/usr/share/locale/*", "/usr/share/info/*")
NGINX_RECIPE = "1"
PYTHON_RECIPE = "1"
GLIBC_DNS_RECIPE = "1"
VKPY_RECIPE = "2"

NGINX_CONFIG = ImageConfig(
    cmd=("nginx", "-g", "daemon off;"),
    exposed_ports=("80/tcp",),
    stop_signal="SIGQUIT",
)
PYTHON_CONFIG = ImageConfig(
    cmd=("python3",),
    env=("PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG=C.UTF-8"),
)
GLIBC_DNS_CONFIG = ImageConfig(
    cmd=("sleep", "infinity"),
    env=("PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",),
)
VKPY_CONFIG = ImageConfig(
    entrypoint=("python", "-m", "vkpy"),
    env=(
        "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "PYTHONDONTWRITEBYTECODE=1",
        "PYTHONUNBUFFERED=1",
    ),
    working_dir="/var/lib/vkpy",
    user="10001:10001",
    exposed_ports=("10250/tcp", "10248/tcp", "10255/tcp"),
)


def mirror() -> str:
    """The Debian mirror (`$VKPY_DEBIAN_MIRROR`, default deb.debian.org)."""
    return os.environ.get("VKPY_DEBIAN_MIRROR", "http://deb.debian.org/debian")


def debian_root(rootfs: Path, packages: tuple[str, ...], what: str) -> None:
    """A minimal Debian root with `packages` into the (empty) directory `rootfs`."""
    if os.geteuid() != 0:
        raise ImageUnavailable(f"the {what} image is built with mmdebstrap as root")
    if shutil.which("mmdebstrap") is None:
        raise ImageUnavailable("no mmdebstrap: install it (`make system-deps`)")
    argv = ["mmdebstrap", "--mode=root", "--variant=essential", "--verbose"]
    argv += [f"--include={','.join(packages)}"]
    argv += [f"--dpkgopt=path-exclude={path}" for path in EXCLUDES]
    argv += [SUITE, str(rootfs), mirror()]
    run_with_progress(f"mmdebstrap {what}", argv)


def _nginx_fill(rootfs: Path) -> None:
    debian_root(rootfs, ("nginx-light",), "nginx")
    logs = rootfs / "var/log/nginx"
    for name, target in (("access.log", "/dev/stdout"), ("error.log", "/dev/stderr")):
        (logs / name).unlink(missing_ok=True)
        (logs / name).symlink_to(target)


def nginx() -> Path:
    """The nginx image's OCI layout (tag `latest`)."""
    key = recipe_key(NGINX_RECIPE, SUITE, mirror(), repr(EXCLUDES), repr(NGINX_CONFIG))
    return cached("nginx", key, lambda dest: layout_from_rootfs(dest, _nginx_fill, NGINX_CONFIG))


def python() -> Path:
    """A Python image: Debian's python3 (3.11) in the minimal root, CMD `python3`; what
    the examples' `python:3.12-slim` pods get on the dev cluster's workers."""
    key = recipe_key(PYTHON_RECIPE, SUITE, mirror(), repr(EXCLUDES), repr(PYTHON_CONFIG))

    def fill(rootfs: Path) -> None:
        debian_root(rootfs, ("python3", "python-is-python3"), "python")

    return cached("python", key, lambda dest: layout_from_rootfs(dest, fill, PYTHON_CONFIG))


def glibc_dns_testing() -> Path:
    """The suite's glibc-dns-testing image: glibc's resolver and `hostname`, dig."""
    key = recipe_key(GLIBC_DNS_RECIPE, SUITE, mirror(), repr(EXCLUDES), repr(GLIBC_DNS_CONFIG))

    def fill(rootfs: Path) -> None:
        debian_root(rootfs, ("bind9-dnsutils",), "glibc-dns-testing")

    return cached(
        "glibc-dns-testing", key, lambda dest: layout_from_rootfs(dest, fill, GLIBC_DNS_CONFIG)
    )


def _sources() -> list[Path]:
    files = [REPO_ROOT / "pyproject.toml", REPO_ROOT / "README.md", REPO_ROOT / "Dockerfile"]
    return files + sorted((REPO_ROOT / "vkpy").rglob("*.py"))


def _vkpy_fill(rootfs: Path) -> None:
    if sys.version_info[:2] != PYTHON:
        raise ImageBuildError(
            f"the vkpy image ({SUITE}, Python {PYTHON[0]}.{PYTHON[1]}) needs wheels built by "
            f"Python {PYTHON[0]}.{PYTHON[1]}, not {sys.version_info[0]}.{sys.version_info[1]}"
        )
    debian_root(rootfs, ("python3", "python-is-python3"), "vkpy")
    with tempfile.TemporaryDirectory(prefix="vkpy-wheels-") as wheels:
        # Wheels of vkpy and its dependencies (from the package index, through pip's cache).
        pip = [sys.executable, "-m", "pip", "--disable-pip-version-check"]
        run_with_progress("vkpy wheels", [*pip, "wheel", "--wheel-dir", wheels, str(REPO_ROOT)])
        site = rootfs / f"usr/local/lib/python{PYTHON[0]}.{PYTHON[1]}/dist-packages"
        # Compiled here (the same bytecode as Debian's 3.11 writes): the image's root is
        # read-only in the chart, and without .pyc files every start compiles vkpy again.
        run(*pip, "install", "--quiet", "--no-index", "--find-links", wheels,
            "--target", site, "vkpy")  # fmt: skip
    with (rootfs / "etc/passwd").open("a") as f:
        f.write("vkpy:x:10001:10001::/var/lib/vkpy:/usr/sbin/nologin\n")
    with (rootfs / "etc/group").open("a") as f:
        f.write("vkpy:x:10001:\n")
    home = rootfs / "var/lib/vkpy"
    home.mkdir(parents=True, exist_ok=True)
    os.chown(home, 10001, 10001)


def vkpy_image() -> Path:
    """vkpy's own image (the chart's `vkpy:<version>`), rebuilt when the code changes."""
    contents = [p.read_bytes() for p in _sources()]
    key = recipe_key(VKPY_RECIPE, SUITE, mirror(), repr(VKPY_CONFIG), *contents)
    return cached(
        "vkpy",
        key,
        lambda layout: layout_from_rootfs(layout, _vkpy_fill, VKPY_CONFIG),
        replaces_older=True,
    )
