"""The audit trail of exec, attach and port-forward: who did what, where, and how it ended.

These three are the kubelet API's ways into a container, and the API server's own
audit log only says that someone asked for `pods/exec`; the node is where the
session actually runs. So every request to /exec, /attach and /portForward leaves
exactly one record on the `vkpy.audit` logger when it is over (route it to its own
file or sink with logging configuration; it is INFO level and structured like
every vkpy log line):

- who: `user` and `groups` as authenticated (absent for a request refused before
  anyone was identified);
- what: `verb` (exec, attach, portforward); for exec the command's argv as a JSON
  array (`command`), `tty` and `stdin` flags; for port-forward the ports. Never the
  environment, never a byte of stdin or output;
- where: `namespace`, `pod`, `uid` (when the path names one), `container`;
- outcome: `status` (101 when upgraded, else the HTTP answer: 400, 403, 404, ...;
  499 when the client left before any answer) and `outcome` (success, exit_code,
  error, client_gone, timeout, or refused), with the session's length in `seconds`.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time

from aiohttp import web
from aiohttp.typedefs import Handler

from vkpy.api.state import AUDIT_DETAIL, AUDIT_OUTCOME, USER_INFO

AUDIT = logging.getLogger("vkpy.audit")
VERBS = {"exec": "exec", "attach": "attach", "portForward": "portforward"}


def _verb(path: str) -> str | None:
    first = path.lstrip("/").split("/", 1)[0]
    return VERBS.get(first)


def _what(request: web.Request, verb: str) -> dict[str, object]:
    query = request.query
    if verb == "portforward":
        ports = query.getall("port", ())
        return {"ports": ",".join(ports)} if ports else {}
    out: dict[str, object] = {
        "tty": query.get("tty", "") in ("1", "true"),
        "stdin": query.get("input", query.get("stdin", "")) in ("1", "true"),
    }
    if verb == "exec":
        out["command"] = json.dumps(query.getall("command", ()))
    return out


def _record(request: web.Request, verb: str, status: int, started: float) -> None:
    match = request.match_info
    fields: dict[str, object] = {"verb": verb}
    user = request.get(USER_INFO)
    if user is not None:
        fields["user"] = user.name
        fields["groups"] = json.dumps(list(user.groups))
    for key in ("namespace", "pod", "uid", "container"):
        value = match.get(key)
        if value:
            fields[key] = value
    fields.update(_what(request, verb))
    fields.update(request.get(AUDIT_DETAIL) or {})
    fields["status"] = status
    fields["outcome"] = request.get(AUDIT_OUTCOME) or ("refused" if status >= 400 else "error")
    fields["seconds"] = round(time.monotonic() - started, 3)
    AUDIT.info(f"{verb} session", extra=fields)


@web.middleware
async def audit_streams(request: web.Request, handler: Handler) -> web.StreamResponse:
    """One audit record per exec, attach or port-forward request (module docstring)."""
    verb = _verb(request.path)
    if verb is None:
        return await handler(request)
    started = time.monotonic()
    status = 500
    try:
        response = await handler(request)
        status = response.status
        return response
    except web.HTTPException as error:
        status = error.status
        raise
    except asyncio.CancelledError:
        # the client went away: during a session (it was upgraded) or before an answer
        status = 101 if request.get(AUDIT_OUTCOME) else 499
        request[AUDIT_OUTCOME] = request.get(AUDIT_OUTCOME) or "client_gone"
        raise
    finally:
        _record(request, verb, status, started)
