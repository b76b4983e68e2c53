"""The dev cluster's image registry: where its nodes pull images from, offline.

This machine reaches no public image registry, so `up` runs one: Debian's
docker-registry (distribution 2.8) serving plain HTTP on a loopback port, its
storage under `<cluster dir>/registry`, recorded in addons.json (so `down` stops it
and `running_components` lists it). It is filled with the images built here
(vkpy/devcluster/images) under their public names, each below a namespace named
after its registry host: `docker.io/library/nginx:alpine` is stored as
`<host>/docker.io/library/nginx:alpine`. The nodes get `registries:` settings
(vkpy/oci/images/registries.py) naming it as the mirror of docker.io and
registry.k8s.io, and `<dir>/registry/registries.conf` is the same as a
containers-registries.conf(5) file for skopeo or podman. On a machine with internet
the same image names pull from the public registries once the mirrors are dropped.
"""

from __future__ import annotations

import json
import shutil
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from pathlib import Path

from vkpy.oci.images import registries

from .images import Built
from .images.build import ImageBuildError, run

#: The public registries the local one mirrors (the hosts of the catalogue's names).
MIRRORED = ("docker.io", "registry.k8s.io")
MANIFEST_TYPES = (
    "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.docker.distribution.manifest.v2+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
)


class RegistryError(RuntimeError):
    """The registry did not start or an image could not be pushed to it."""


def config_text(root: Path, address: str, htpasswd: Path | None = None) -> str:
    """docker-registry's config.yml: filesystem storage under `root`, plain HTTP on
    `address`, an access log, optional htpasswd (bcrypt) basic auth."""
    lines = [
        "version: 0.1",
        "log: {level: warn, accesslog: {disabled: false}}",
        f"storage: {{filesystem: {{rootdirectory: {root / 'data'}}}, delete: {{enabled: true}}}}",
        f"http: {{addr: '{address}'}}",
    ]
    if htpasswd is not None:
        lines.append(f"auth: {{htpasswd: {{realm: vkpy, path: {htpasswd}}}}}")
    return "\n".join(lines) + "\n"


def argv(config: Path) -> list[str]:
    binary = shutil.which("docker-registry")
    if binary is None:
        raise RegistryError("no docker-registry: install it (`make system-deps`)")
    return [binary, "serve", str(config)]


def answers(host: str) -> bool:
    """Whether a registry answers on `host` (a 401 counts: it asks for credentials)."""
    try:
        urllib.request.urlopen(f"http://{host}/v2/", timeout=1)
    except urllib.error.HTTPError:
        return True
    except OSError:
        return False
    return True


def wait_until_answering(host: str, alive: object, timeout: float = 15.0) -> None:
    """Poll until the registry on `host` answers; `alive()` False means it exited."""
    deadline = time.monotonic() + timeout
    while not answers(host):
        if callable(alive) and not alive():
            raise RegistryError(f"docker-registry on {host} exited")
        if time.monotonic() > deadline:
            raise RegistryError(f"docker-registry did not answer on {host} in {timeout:g} s")
        time.sleep(0.05)


def local_name(host: str, reference: str) -> str:
    """Where a public name is stored: `docker.io/library/x:1` → `<host>/docker.io/library/x:1`."""
    return f"{host}/{reference}"


def stored_digest(host: str, reference: str) -> str | None:
    """The digest the registry serves for `reference` (a public name), or None."""
    repository, tag = reference.rsplit(":", 1)
    request = urllib.request.Request(
        f"http://{host}/v2/{repository}/manifests/{tag}",
        method="HEAD",
        headers={"Accept": ", ".join(MANIFEST_TYPES)},
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:  # noqa: S310 - http://
            digest = response.headers.get("Docker-Content-Digest")
            return str(digest) if digest else None
    except (urllib.error.HTTPError, OSError):
        return None


def push(host: str, built: Built) -> list[str]:
    """Push `built` under each of its public names not already there with its digest;
    the names pushed."""
    pushed = []
    for reference in built.image.references:
        if stored_digest(host, reference) == built.digest:
            continue
        try:
            run(
                "skopeo", "--insecure-policy", "copy", "--quiet", "--dest-tls-verify=false",
                f"oci:{built.layout}:latest", f"docker://{local_name(host, reference)}",
            )  # fmt: skip
        except ImageBuildError as e:
            raise RegistryError(f"pushing {reference}: {e}") from None
        pushed.append(reference)
    return pushed


def mirrors_setting(host: str) -> dict[str, object]:
    """The nodes' `registries:` setting: the local registry mirrors each of MIRRORED
    (under a namespace named after it) and is itself reached over plain HTTP."""
    setting: dict[str, object] = {
        public: {"mirrors": [f"http://{host}/{public}"]} for public in MIRRORED
    }
    setting[host] = {"insecure": True}
    return setting


def registries_conf(setting: Mapping[str, object]) -> str:
    """The setting as a containers-registries.conf(5) v2 file (as the nodes write it)."""
    return registries.registries_conf(registries.from_config(setting))


def summary(built: list[Built]) -> str:
    return json.dumps(
        {b.image.name: {"digest": b.digest, "bytes": b.size} for b in built}, indent=2
    )
