"""The images the process backend runs without being told: small host stand-ins.

Pods written for a container runtime often name an image and no command: the pause
image, busybox (whose CMD is `sh`), nginx or httpd serving a page, Kubernetes' test
image agnhost (a subcommand as `args`). These rules map them to host programs that
behave like the image for what such pods use: `pause.py` sleeps until stopped,
`web.py` serves the image's document root over HTTP on port 80, `busybox/` puts
bash first on PATH as `sh` (the host's dash drops environment names with `-` and has
no `[[`) with a `busybox` applet dispatcher and `nc` (netcat.py: hosts often have
no netcat), and agnhost is the real program, found
on PATH (build it with `controlplane/build.sh agnhost`); Kubernetes' `nonroot` test
image is the busybox stand-in run as its USER, 1234, and its `nonewprivs` image
prints the effective uid its set-uid program would have here (never raised). The
`images` setting comes first and can replace or drop any of these.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from vkpy.providers.process.images import ImageRule, ImageSpec

HERE = Path(__file__).resolve().parent
BUSYBOX_BIN = str(HERE / "busybox")


def _script(python: str, name: str) -> tuple[str, ...]:
    return (python, "-I", "-S", str(HERE / name))


def _web(python: str, root: str, page: str) -> ImageSpec:
    return ImageSpec(
        entrypoint=_script(python, "web.py"),
        cmd=("--port", "80", "--root", root, "--page", page),
        working_dir="/",
        user=0,
    )


def default_rules(python: str) -> tuple[ImageRule, ...]:
    """The shipped rules; `python` runs the Python stand-ins (standard library only,
    `-I -S`): the host's `python3` when containers run as another user than vkpy."""
    # The images' USER as these stand-ins say it: root (nonroot's is 1234).
    shell = ImageSpec(cmd=("sh",), path=(BUSYBOX_BIN,), working_dir="/", user=0)
    pause = ImageSpec(entrypoint=_script(python, "pause.py"), working_dir="/", user=0)
    agnhost = ImageSpec(
        entrypoint=("/agnhost",), cmd=("pause",), path=(BUSYBOX_BIN,), working_dir="/", user=0
    )
    # Kubernetes' test image of a non-root user: a busybox whose USER is 1234.
    nonroot = dataclasses.replace(shell, user=1234)
    # Kubernetes' nonewprivs test image: a set-uid root program printing its effective
    # uid. Privileges are never raised here (no_new_privs), so it is the container's.
    nonewprivs = ImageSpec(
        cmd=("sh", "-c", 'echo "Effective uid: $(id -u)"'),
        path=(BUSYBOX_BIN,),
        working_dir="/",
        user=0,
    )
    nginx = _web(python, "/usr/share/nginx/html", "nginx")
    httpd = _web(python, "/usr/local/apache2/htdocs", "httpd")
    return (
        ImageRule("registry.k8s.io/e2e-test-images/agnhost", agnhost),
        ImageRule("*/agnhost", agnhost),
        ImageRule("registry.k8s.io/pause", pause),
        ImageRule("*/pause", pause),
        ImageRule("registry.k8s.io/e2e-test-images/nonroot", nonroot),
        ImageRule("registry.k8s.io/e2e-test-images/nonewprivs", nonewprivs),
        ImageRule("busybox", shell),
        ImageRule("*/busybox", shell),
        ImageRule("nginx", nginx),
        ImageRule("*/nginx", nginx),
        ImageRule("httpd", httpd),
        ImageRule("*/httpd", httpd),
    )
