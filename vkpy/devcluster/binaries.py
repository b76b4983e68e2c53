"""Finding the control-plane binaries the dev cluster runs.

vkpy tests against real Kubernetes binaries of one pinned release, built from the Go
module in `controlplane/` by `controlplane/build.sh` into a cache outside the
checkout. This module asks that script where they are (it builds them the first
time), honours `VKPY_CONTROLPLANE_BIN` for binaries obtained elsewhere, and turns
every way of not having them into one error that says how to get them. The system
`kubectl` on PATH is deliberately never used: it may be any version.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

BINARIES = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl")
ENV_BIN_DIR = "VKPY_CONTROLPLANE_BIN"

#: The repository root when running from a checkout (vkpy/devcluster/ -> repo).
REPO_ROOT = Path(__file__).resolve().parents[2]
CONTROLPLANE_DIR = REPO_ROOT / "controlplane"
BUILD_SCRIPT = CONTROLPLANE_DIR / "build.sh"

HOW_TO_GET = (
    "Build them with controlplane/build.sh (needs Go 1.26+, takes 10-40 minutes the first "
    f"time), or set {ENV_BIN_DIR} to a directory holding: {', '.join(BINARIES)}."
)


class BinariesMissing(RuntimeError):
    """The control-plane binaries are not available; the message says how to fix it."""


def missing_binaries(bin_dir: Path) -> list[str]:
    """Names of the required binaries that are absent or not executable in `bin_dir`."""
    return [b for b in BINARIES if not os.access(bin_dir / b, os.X_OK)]


def check_bin_dir(bin_dir: Path, source: str) -> Path:
    """Return `bin_dir` if it holds every binary, else raise BinariesMissing."""
    missing = missing_binaries(bin_dir)
    if missing:
        raise BinariesMissing(
            f"{source} {bin_dir} lacks executable {', '.join(missing)}. {HOW_TO_GET}"
        )
    return bin_dir


def find_bin_dir() -> Path:
    """The directory of the pinned control-plane binaries.

    `VKPY_CONTROLPLANE_BIN` wins. Otherwise `controlplane/build.sh` is run; it prints
    the cache directory, building first if needed (its progress goes to stderr).
    """
    env_dir = os.environ.get(ENV_BIN_DIR)
    if env_dir:
        return check_bin_dir(Path(env_dir), ENV_BIN_DIR)
    if not BUILD_SCRIPT.exists():
        raise BinariesMissing(
            f"{BUILD_SCRIPT} not found (not running from a checkout). {HOW_TO_GET}"
        )
    result = subprocess.run(
        [str(BUILD_SCRIPT)], stdout=subprocess.PIPE, text=True, check=False, cwd=REPO_ROOT
    )
    lines = result.stdout.strip().splitlines()
    if result.returncode != 0 or not lines:
        raise BinariesMissing(
            f"{BUILD_SCRIPT} failed (exit {result.returncode}, see its messages above). "
            + HOW_TO_GET
        )
    return check_bin_dir(Path(lines[-1]), f"{BUILD_SCRIPT} printed")


def pinned_release() -> str:
    """The Kubernetes release pinned in controlplane/go.mod, e.g. "v1.36.3"."""
    for line in (CONTROLPLANE_DIR / "go.mod").read_text().splitlines():
        fields = line.split()
        if len(fields) >= 2 and fields[0] == "k8s.io/kubernetes" and fields[1].startswith("v"):
            return fields[1]
    raise RuntimeError(f"no k8s.io/kubernetes requirement in {CONTROLPLANE_DIR / 'go.mod'}")


def tool_dir(tool: str) -> Path:
    """The directory of a pinned Go tool from `controlplane/tools/<tool>/` (built once).

    Benchmarks and tests that run another Go program (helm, metrics-server, kwok, the
    e2e suite, ...) get it here, built by `controlplane/build.sh <tool>` into the cache.
    """
    if not BUILD_SCRIPT.exists():
        raise BinariesMissing(f"{BUILD_SCRIPT} not found (not running from a checkout).")
    result = subprocess.run(
        [str(BUILD_SCRIPT), tool], stdout=subprocess.PIPE, text=True, check=False, cwd=REPO_ROOT
    )
    lines = result.stdout.strip().splitlines()
    if result.returncode != 0 or not lines:
        raise BinariesMissing(
            f"{BUILD_SCRIPT} {tool} failed (exit {result.returncode}, see its messages above)"
        )
    return Path(lines[-1])
