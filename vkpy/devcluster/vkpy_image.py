"""The chart's `image: vkpy:<version>` on the dev cluster's process workers.

`helm install charts/vkpy` onto the dev cluster schedules vkpy's own pod onto a
worker, which runs the process backend: no image is pulled, so the worker's `images`
setting (vkpy/providers/process/images.py) must say what stands in for `vkpy`. The
stand-in is this checkout: `python3 -m vkpy` (the image's entrypoint) with the
project's virtualenv, so the pod runs the code under test.

The pod runs as an unprivileged user of its own, which must be able to execute the
interpreter. A virtualenv's `python3` is often a link into a closed home directory
(pyenv under /root); then a host interpreter of the same version is used instead,
with the virtualenv's packages and the project on PYTHONPATH (the compiled wheels
are per Python version, not per interpreter build).
"""

from __future__ import annotations

import copy
import os
import stat
import sys
import sysconfig
from collections.abc import Mapping
from pathlib import Path

import vkpy

#: Image patterns the entry answers: the chart's default `vkpy` and any registry's.
PATTERNS = ("vkpy", "*/vkpy")
#: The host directories searched for a usable interpreter when the virtualenv's is closed.
HOST_PATH = ("/usr/local/bin", "/usr/bin", "/bin")


def reachable_by_others(path: Path) -> bool:
    """Whether a user with no special rights can execute `path`: every directory
    above it searchable, the file itself executable, by "others"."""
    real = path.resolve()
    try:
        if not real.stat().st_mode & stat.S_IXOTH:
            return False
        return all(parent.stat().st_mode & stat.S_IXOTH for parent in real.parents)
    except OSError:
        return False


def _same_version(python3: Path) -> bool:
    """`python3` is this interpreter's major.minor (judged by the file it links to)."""
    wanted = f"python{sys.version_info.major}.{sys.version_info.minor}"
    return python3.resolve().name == wanted


def interpreter_dir(
    executable: str = sys.executable, host_path: tuple[str, ...] = HOST_PATH
) -> tuple[Path, bool]:
    """(a directory whose `python3` pods can run, whether that is `executable`'s own).

    RuntimeError when neither the virtualenv's nor a host interpreter of the same
    version is reachable."""
    own = Path(executable).parent
    if reachable_by_others(own / "python3"):
        return own, True
    for directory in host_path:
        candidate = Path(directory) / "python3"
        if candidate.exists() and _same_version(candidate) and reachable_by_others(candidate):
            return Path(directory), False
    raise RuntimeError(
        f"no python3.{sys.version_info.minor} that an unprivileged pod can run: "
        f"{executable} is closed to other users and none is in {', '.join(host_path)}"
    )


def image_entry(executable: str = sys.executable) -> dict[str, object]:
    """The `images` entry (see the process backend's images.py) for the vkpy image."""
    directory, own = interpreter_dir(executable)
    # The image's ENV, and the HOME a runtime gives its user (the Dockerfile's vkpy
    # user, home /var/lib/vkpy): the pod's uid has no entry in the host's passwd.
    env = {"PYTHONDONTWRITEBYTECODE": "1", "PYTHONUNBUFFERED": "1", "HOME": "/var/lib/vkpy"}
    if not own:
        project = Path(vkpy.__file__).resolve().parent.parent
        paths = sysconfig.get_paths()
        packages = dict.fromkeys([str(project), paths["purelib"], paths["platlib"]])
        env["PYTHONPATH"] = os.pathsep.join(packages)
    return {"entrypoint": ["python3", "-m", "vkpy"], "path": [str(directory)], "env": env}


def images_setting(configured: Mapping[str, object] | None = None) -> dict[str, object]:
    """A node's `images` setting: what it was configured with, then the vkpy image
    (a configured entry for the same pattern wins)."""
    images: dict[str, object] = dict(configured or {})
    entry = image_entry()
    for pattern in PATTERNS:
        images.setdefault(pattern, copy.deepcopy(entry))
    return images
