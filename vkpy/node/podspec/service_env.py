"""The environment variables a kubelet gives containers for the Services of their
namespace (`enableServiceLinks`, on unless a pod turns it off).

For each Service with a ClusterIP (not headless) in the pod's namespace, as of when
the container's configuration is built: `<NAME>_SERVICE_HOST`,
`<NAME>_SERVICE_PORT` (first port), `<NAME>_SERVICE_PORT_<PORTNAME>` per named
port, and the Docker-link style `<NAME>_PORT`, `<NAME>_PORT_<port>_<PROTO>`,
`..._PROTO`, `..._PORT`, `..._ADDR`; `<NAME>` is the Service's name upper-cased
with `-` as `_`. They come before the container's own variables, which win, and
`$(VAR)` references may use them. The `kubernetes` Service of the `default`
namespace is left to the backend: it knows which address of the API server its
containers can reach (the process backend's `kubernetes_service_host`), which need
not be the ClusterIP.
"""

from __future__ import annotations

from collections.abc import Iterable

from vkpy.core.objects import KubeObject, meta, spec

MASTER_SERVICE = ("default", "kubernetes")


def _variable_name(name: str) -> str:
    return name.upper().replace("-", "_")


def _cluster_ip(service: KubeObject) -> str | None:
    ip = str(spec(service).get("clusterIP") or "")
    return ip if ip and ip != "None" else None


def service_variables(services: Iterable[KubeObject]) -> list[tuple[str, str]]:
    """The variables for `services` (one namespace's), in the order given."""
    out: list[tuple[str, str]] = []
    for service in services:
        m = meta(service)
        ip = _cluster_ip(service)
        ports = spec(service).get("ports") or []
        if ip is None or (m.get("namespace"), m.get("name")) == MASTER_SERVICE or not ports:
            continue
        name = _variable_name(str(m.get("name", "")))
        out.append((f"{name}_SERVICE_HOST", ip))
        out.append((f"{name}_SERVICE_PORT", str(ports[0].get("port", ""))))
        for port in ports:
            if port.get("name"):
                out.append(
                    (
                        f"{name}_SERVICE_PORT_{_variable_name(str(port['name']))}",
                        str(port.get("port", "")),
                    )
                )
        host = f"[{ip}]" if ":" in ip else ip
        for index, port in enumerate(ports):
            number = str(port.get("port", ""))
            protocol = str(port.get("protocol") or "TCP")
            url = f"{protocol.lower()}://{host}:{number}"
            prefix = f"{name}_PORT_{number}_{protocol.upper()}"
            if index == 0:
                out.append((f"{name}_PORT", url))
            out += [
                (prefix, url),
                (f"{prefix}_PROTO", protocol.lower()),
                (f"{prefix}_PORT", number),
                (f"{prefix}_ADDR", ip),
            ]
    return out
