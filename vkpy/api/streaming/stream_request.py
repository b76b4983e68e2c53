"""What the exec, attach and port-forward endpoints check before they upgrade a connection.

The kubelet answers these in plain HTTP, before any upgrade: an unknown pod (or a
pod-UID path whose UID is not the pod's) is 404 "pod does not exist", an unknown
container 404, stream options that ask for nothing 400. Everything after the
upgrade is reported on the error stream instead.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from aiohttp import web

from vkpy.api.state import deps as deps_of
from vkpy.api.state import plain
from vkpy.api.streaming.shared import STREAM_SETTINGS, StreamSettings
from vkpy.core.objects import KubeObject, spec, uid_of
from vkpy.providers.base import PodRef
from vkpy.streams.channels import split_offered
from vkpy.streams.remotecommand import HEADER_ACCEPTED_PROTOCOL_VERSIONS


@dataclass(frozen=True)
class Target:
    """The node's pod a stream request is for."""

    ref: PodRef
    pod: KubeObject


def find_target(request: web.Request) -> Target | web.Response:
    """The pod named by the path (`{namespace}/{pod}` and optional `{uid}`), or a 404."""
    deps = deps_of(request)
    namespace = request.match_info["namespace"]
    name = request.match_info["pod"]
    uid = request.match_info.get("uid") or None
    pod = deps.find_pod(namespace, name, uid)
    if pod is None:
        return plain(404, "pod does not exist")
    return Target(PodRef(namespace, name, uid_of(pod)), pod)


def has_container(pod: KubeObject, name: str) -> bool:
    podspec = spec(pod)
    for field in ("containers", "initContainers", "ephemeralContainers"):
        for container in podspec.get(field) or ():
            if container.get("name") == name:
                return True
    return False


def stream_settings(request: web.Request) -> StreamSettings:
    return request.app.get(STREAM_SETTINGS) or StreamSettings()


def refuse_protocols(offered: Sequence[str], supported: Sequence[str]) -> web.Response:
    """403 listing what we accept, as the kubelet answers a SPDY client it cannot serve."""
    response = plain(
        403,
        "unable to upgrade: unable to negotiate protocol: client supports "
        f"[{' '.join(split_offered(offered))}], server accepts [{' '.join(supported)}]",
    )
    for name in supported:
        response.headers.add(HEADER_ACCEPTED_PROTOCOL_VERSIONS, name)
    return response
