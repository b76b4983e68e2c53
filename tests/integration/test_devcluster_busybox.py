"""The busybox image's own /bin/busybox, as a user would check it: its `sh` passes
every environment variable on to the programs it runs, also those whose names are
no shell identifiers (`data-1`, what a pod's envFrom makes of a ConfigMap's keys), as
upstream's busybox does (Docker's and Kubernetes' busybox images); Debian's drops
them."""

from __future__ import annotations

import json
import subprocess
import tarfile
from pathlib import Path

from vkpy.devcluster.images.busybox import busybox


def image_file(layout: Path, path: str, dest: Path) -> Path:
    """`path` of the layout's image (its last layer that has it), written to `dest`."""
    blobs = layout / "blobs" / "sha256"

    def blob(digest: str) -> Path:
        return blobs / digest.removeprefix("sha256:")

    index = json.loads((layout / "index.json").read_text())
    manifest = json.loads(blob(index["manifests"][0]["digest"]).read_text())
    found = False
    for layer in manifest["layers"]:
        with tarfile.open(blob(layer["digest"])) as tar:
            for member in tar.getmembers():
                if member.name.removeprefix("./") == path and member.isfile():
                    extracted = tar.extractfile(member)
                    assert extracted is not None
                    dest.write_bytes(extracted.read())
                    found = True
    assert found, f"{path} is in no layer of {layout}"
    dest.chmod(0o755)
    return dest


def test_the_images_sh_passes_on_env_names_that_are_not_identifiers(tmp_path: Path) -> None:
    binary = image_file(busybox(), "bin/busybox", tmp_path / "busybox")
    shown = subprocess.run(
        ["env", "-i", "data-1=value-1", "p-data-1=value-1", "PATH=/bin",
         binary, "sh", "-c", "env"],
        capture_output=True, text=True, check=True, timeout=30,
    ).stdout.splitlines()  # fmt: skip
    assert "data-1=value-1" in shown, shown
    assert "p-data-1=value-1" in shown, shown
