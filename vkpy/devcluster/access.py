"""How a tool or test talks to a cluster: a kubeconfig plus the pinned kubectl.

Tests, benchmarks and `make run` need the same two things whether the cluster is the
local dev cluster or one named by a kubeconfig: the kubeconfig, and a kubectl of the
pinned release bound to it. `ClusterAccess` is that pair, with a `run_kubectl` that
raises an error showing kubectl's stderr instead of a bare exit code.
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from .kubeconfig import kubeconfig_server


class KubectlError(subprocess.CalledProcessError):
    """kubectl exited non-zero; the message carries its stderr."""

    def __str__(self) -> str:
        return f"{super().__str__()}\nstdout:\n{self.stdout}\nstderr:\n{self.stderr}"


class RunKubectl(Protocol):
    """The signature of `ClusterAccess.run_kubectl` (and of the `run_kubectl` fixture)."""

    def __call__(
        self,
        *args: str,
        input: str | None = None,
        timeout: float = 60.0,
        check: bool = True,
    ) -> subprocess.CompletedProcess[str]: ...


@dataclass(frozen=True)
class ClusterAccess:
    """A kubeconfig and the kubectl binary to use with it."""

    kubeconfig: Path
    kubectl: Path

    @property
    def server(self) -> str:
        """The API server URL of the kubeconfig's current context."""
        return kubeconfig_server(self.kubeconfig)

    def kubectl_argv(self, *args: str) -> list[str]:
        return [str(self.kubectl), f"--kubeconfig={self.kubeconfig}", *args]

    def run_kubectl(
        self,
        *args: str,
        input: str | None = None,
        timeout: float = 60.0,
        check: bool = True,
    ) -> subprocess.CompletedProcess[str]:
        """Run kubectl with this kubeconfig; text in and out.

        With `check` (the default) a non-zero exit raises KubectlError.
        """
        argv = self.kubectl_argv(*args)
        result = subprocess.run(
            argv, input=input, capture_output=True, text=True, timeout=timeout, check=False
        )
        if check and result.returncode != 0:
            raise KubectlError(result.returncode, argv, result.stdout, result.stderr)
        return result

    def env(self) -> dict[str, str]:
        """Environment variables that point kubectl and clients at this cluster."""
        path = os.environ.get("PATH", "")
        return {
            "KUBECONFIG": str(self.kubeconfig),
            "PATH": f"{self.kubectl.parent}{os.pathsep}{path}"
            if path
            else str(self.kubectl.parent),
        }
