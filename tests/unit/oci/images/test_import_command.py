"""`python -m vkpy images import FILE`: an OCI layout or docker-archive tarball into
the node's store, as `kind load` does, run as a user runs it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from vkpy.oci.images.store import node_store


def vkpy_images(state_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "vkpy", "images", "--state-dir", str(state_dir), *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def archive(busybox: Path, destination: str) -> None:
    subprocess.run(
        ["skopeo", "--insecure-policy", "copy", "--quiet", f"oci:{busybox}:latest", destination],
        check=True,
        timeout=120,
    )


def test_import_oci_archive(tmp_path: Path, busybox: Path) -> None:
    tarball = tmp_path / "app.tar"
    archive(busybox, f"oci-archive:{tarball}:registry.example/team/app:v1")
    state = tmp_path / "state"
    done = vkpy_images(state, "import", str(tarball))
    assert done.returncode == 0, done.stderr
    assert "imported registry.example/team/app:v1 (registry.example/team/app@sha256:" in done.stdout
    store = node_store(state)
    image = store.lookup("registry.example/team/app:v1")
    assert image is not None
    assert store.config("registry.example/team/app:v1").cmd == ("sh",)
    listed = vkpy_images(state, "list")
    assert listed.returncode == 0
    assert image.manifest_digest in listed.stdout
    assert "registry.example/team/app:v1" in listed.stdout


def test_import_bare_tag_needs_a_name(tmp_path: Path, busybox: Path) -> None:
    tarball = tmp_path / "bare.tar"
    archive(busybox, f"oci-archive:{tarball}:v2")
    state = tmp_path / "state"
    refused = vkpy_images(state, "import", str(tarball))
    assert refused.returncode == 1
    assert "give one with --name" in refused.stderr
    named = vkpy_images(state, "import", str(tarball), "--name", "app")
    assert named.returncode == 0, named.stderr
    assert node_store(state).lookup("docker.io/library/app:v2") is not None


def test_import_docker_archive(tmp_path: Path, busybox: Path) -> None:
    tarball = tmp_path / "saved.tar"
    archive(busybox, f"docker-archive:{tarball}:me/tool:3")
    state = tmp_path / "state"
    done = vkpy_images(state, "import", str(tarball))
    assert done.returncode == 0, done.stderr
    assert "imported docker.io/me/tool:3" in done.stdout
    assert node_store(state).lookup("me/tool:3") is not None


def test_import_refuses_what_is_not_an_image_archive(tmp_path: Path) -> None:
    junk = tmp_path / "junk.tar"
    junk.write_bytes(b"not a tarball at all")
    state = tmp_path / "state"
    done = vkpy_images(state, "import", str(junk))
    assert done.returncode == 1
    assert done.stderr.startswith("vkpy images: error:")
    assert "not a readable tar archive" in done.stderr
    missing = vkpy_images(state, "import", str(tmp_path / "nope.tar"))
    assert missing.returncode == 1
    assert "no such file" in missing.stderr
    assert node_store(state).images() == []
