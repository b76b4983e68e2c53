"""Every path of the kubelet's router (pkg/kubelet/server/server.go, Kubernetes 1.36)
and of Virtual Kubelet's (node/api), in both spellings (with and without a trailing
slash), against vkpy's router: what each answers.

The kubelet's go-restful routes ignore a trailing slash, its `/runningpods/` is
reached without one through a redirect, and Virtual Kubelet's router has
`StrictSlash(true)`; so a client may use either spelling and vkpy answers both.
Paths the kubelet serves and vkpy has nothing behind (cAdvisor metrics, z-pages,
pprof, node logs, checkpoints, /run) answer 501 saying so, not 404.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.unit.api.test_api_server import ScriptedProvider, StartApi, start_api  # noqa: F401

OK, ROUTED, NOT_SERVED, NOT_FOUND = "200", "routed", "501", "404"
"""ROUTED: reaches the stream handler (no upgrade asked: a 400 from it, never 404)."""

TABLE: list[tuple[str, str, str]] = [
    # (method, path without trailing slash, what vkpy answers)
    ("GET", "/healthz", OK),
    ("GET", "/healthz/ping", OK),
    ("GET", "/healthz/log", OK),
    ("GET", "/healthz/syncloop", OK),
    ("GET", "/pods", OK),
    ("GET", "/runningpods", OK),
    ("GET", "/stats/summary", OK),
    ("GET", "/metrics", OK),
    ("GET", "/metrics/resource", OK),
    ("GET", "/metrics/cadvisor", NOT_SERVED),
    ("GET", "/metrics/probes", NOT_SERVED),
    ("GET", "/metrics/slis", NOT_SERVED),
    ("GET", "/containerLogs/ns/web/app", OK),
    ("GET", "/exec/ns/web/app", ROUTED),
    ("POST", "/exec/ns/web/app", ROUTED),
    ("GET", "/exec/ns/web/uid-web/app", ROUTED),
    ("POST", "/exec/ns/web/uid-web/app", ROUTED),
    ("GET", "/attach/ns/web/app", ROUTED),
    ("POST", "/attach/ns/web/app", ROUTED),
    ("GET", "/attach/ns/web/uid-web/app", ROUTED),
    ("POST", "/attach/ns/web/uid-web/app", ROUTED),
    ("GET", "/portForward/ns/web", ROUTED),
    ("POST", "/portForward/ns/web", ROUTED),
    ("GET", "/portForward/ns/web/uid-web", ROUTED),
    ("POST", "/portForward/ns/web/uid-web", ROUTED),
    ("POST", "/run/ns/web/app", NOT_SERVED),
    ("POST", "/run/ns/web/uid-web/app", NOT_SERVED),
    ("GET", "/configz", NOT_SERVED),
    ("GET", "/statusz", NOT_SERVED),
    ("GET", "/flagz", NOT_SERVED),
    ("GET", "/logs", NOT_SERVED),
    ("GET", "/logs/kubelet.log", NOT_SERVED),
    ("GET", "/debug/pprof", NOT_SERVED),
    ("GET", "/debug/pprof/heap", NOT_SERVED),
    ("PUT", "/debug/flags/v", NOT_SERVED),
    ("POST", "/checkpoint/ns/web/app", NOT_SERVED),
    ("GET", "/no/such/path", NOT_FOUND),
    ("GET", "/podsx", NOT_FOUND),
]


def _cases() -> list[Any]:
    out = []
    for method, path, expected in TABLE:
        for spelling in (path, path + "/"):
            out.append(pytest.param(method, spelling, expected, id=f"{method} {spelling}"))
    return out


async def test_every_kubelet_and_virtual_kubelet_path_in_both_spellings(
    start_api: StartApi,  # noqa: F811
) -> None:
    api = await start_api(ScriptedProvider(lines=[b"x\n"]))
    wrong: list[str] = []
    for case in _cases():
        method, path, expected = case.values
        async with api.session.request(method, api.url + path, ssl=False) as response:
            status = response.status
            await response.read()
        fits = status == 400 if expected == ROUTED else str(status) == expected
        if not fits:
            wrong.append(f"{method} {path}: {status}, want {expected}")
    assert wrong == []


async def test_read_only_paths_refuse_other_methods(start_api: StartApi) -> None:  # noqa: F811
    api = await start_api(ScriptedProvider())
    for path in ("/pods", "/runningpods/", "/stats/summary", "/containerLogs/ns/web/app"):
        async with api.session.post(api.url + path, ssl=False) as response:
            assert response.status == 405, path
