"""`python -m vkpy.devcluster up` runs the image registry, `down` stops it: as a user
runs them from a shell, checked as a user would (the registry's digest through the
mirrors file `up` wrote, the process and port gone after `down`)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from vkpy.devcluster import images, registry
from vkpy.devcluster.processes import ProcessRecord, is_running

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.timeout(600)


def devcluster(*args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env.pop("KUBECONFIG", None)
    return subprocess.run(
        [sys.executable, "-m", "vkpy.devcluster", *args],
        capture_output=True, text=True, env=env, cwd=ROOT, timeout=540, check=False,
    )  # fmt: skip


def registry_record(directory: Path) -> dict[str, object]:
    records = json.loads((directory / "addons.json").read_text())
    found: dict[str, object] = next(r for r in records if r["kind"] == "registry")
    return found


def test_up_starts_the_registry_with_its_images_and_down_stops_it(tmp_path: Path) -> None:
    directory = tmp_path / "cluster"
    options = ["--dir", str(directory), "--no-metrics-server", "--images", "busybox,pause"]
    up = devcluster("up", *options)
    try:
        assert up.returncode == 0, up.stderr
        record = registry_record(directory)
        host = f"127.0.0.1:{record['port']}"
        assert f"registry: http://{host} serving busybox, pause" in up.stdout
        process = record["process"]
        assert isinstance(process, dict)
        pid = ProcessRecord.from_json(process)
        assert is_running(pid)
        # Its storage is under the cluster's directory, each image below its host's name.
        repositories = directory / "registry/data/docker/registry/v2/repositories"
        assert (repositories / "registry.k8s.io/pause").is_dir()
        assert (repositories / "docker.io/library/busybox").is_dir()
        # The mirrors file `up` wrote takes the public names to it.
        conf = directory / "registry" / "registries.conf"
        pause = images.build(["pause"])[0]
        inspected = subprocess.run(
            ["skopeo", "inspect", "--no-tags", "--registries-conf", str(conf),
             "docker://registry.k8s.io/pause:3.10"],
            capture_output=True, text=True, check=False, timeout=60,
        )  # fmt: skip
        assert inspected.returncode == 0, inspected.stderr
        assert json.loads(inspected.stdout)["Digest"] == pause.digest
        # A second `up` keeps the running registry (same process, same port).
        again = devcluster("up", *options)
        assert again.returncode == 0, again.stderr
        assert registry_record(directory) == record
    finally:
        down = devcluster("down", "--dir", str(directory))
    assert down.returncode == 0, down.stderr
    assert "registry" in down.stdout
    assert not is_running(pid)
    assert not registry.answers(host)
    assert not any(
        r["kind"] == "registry" for r in json.loads((directory / "addons.json").read_text())
    )
