"""The emulator's Microsoft Entra ID: the token endpoints azure-identity calls.

The backend authenticates with azure-identity's real credential classes, so the
emulator issues tokens the way Entra ID's v2.0 endpoint does for a client secret or
a federated client assertion (`/{tenant}/oauth2/v2.0/token`), and the way App
Service's managed identity endpoint does (`IDENTITY_ENDPOINT` with its header).
Tokens are opaque random strings remembered with their audience and expiry; the
ARM routes accept only those.
"""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass, field

from aiohttp import web

ARM_AUDIENCE = "https://management.azure.com"


@dataclass
class Directory:
    tenant: str = "00000000-0000-0000-0000-00000000a1d0"
    client_id: str = "11111111-2222-3333-4444-555555555555"
    client_secret: str = field(default_factory=lambda: secrets.token_urlsafe(16))
    identity_header: str = field(default_factory=lambda: secrets.token_hex(8))
    federated_assertion: str = field(default_factory=lambda: secrets.token_urlsafe(24))
    lifetime: int = 3600
    tokens: dict[str, tuple[str, float]] = field(default_factory=dict)
    issued: int = 0

    def _issue(self, resource: str) -> tuple[str, int]:
        token = secrets.token_urlsafe(32)
        expires = int(time.time()) + self.lifetime
        self.tokens[token] = (resource.rstrip("/"), expires)
        self.issued += 1
        return token, expires

    def valid(self, authorization: str | None) -> bool:
        if not authorization or not authorization.startswith("Bearer "):
            return False
        found = self.tokens.get(authorization.removeprefix("Bearer "))
        return found is not None and found[0] == ARM_AUDIENCE and found[1] > time.time()

    async def token(self, request: web.Request) -> web.Response:
        if request.match_info["tenant"] != self.tenant:
            return _oauth_error(400, "invalid_request", "AADSTS90002: Tenant not found.")
        form = await request.post()
        if form.get("grant_type") != "client_credentials":
            return _oauth_error(400, "unsupported_grant_type", "AADSTS70003")
        if form.get("client_id") != self.client_id:
            return _oauth_error(400, "unauthorized_client", "AADSTS700016: unknown application")
        secret_ok = form.get("client_secret") == self.client_secret
        assertion_ok = (
            form.get("client_assertion_type")
            == "urn:ietf:params:oauth:client-assertion-type:jwt-bearer"
            and form.get("client_assertion") == self.federated_assertion
        )
        if not (secret_ok or assertion_ok):
            return _oauth_error(401, "invalid_client", "AADSTS7000215: Invalid client secret.")
        scope = str(form.get("scope") or "")
        if not scope.endswith("/.default"):
            return _oauth_error(400, "invalid_scope", "AADSTS70011: The scope is not valid.")
        token, expires = self._issue(scope.removesuffix("/.default"))
        return web.json_response(
            {
                "token_type": "Bearer",
                "expires_in": expires - int(time.time()),
                "ext_expires_in": expires - int(time.time()),
                "access_token": token,
            }
        )

    async def managed_identity(self, request: web.Request) -> web.Response:
        if request.headers.get("X-IDENTITY-HEADER") != self.identity_header:
            return web.json_response({"error": "invalid identity header"}, status=401)
        resource = request.query.get("resource")
        if not resource:
            return web.json_response({"error": "resource is required"}, status=400)
        token, expires = self._issue(resource)
        return web.json_response(
            {
                "access_token": token,
                "expires_on": str(expires),
                "resource": resource,
                "token_type": "Bearer",
                "client_id": self.client_id,
            }
        )


def _oauth_error(status: int, code: str, description: str) -> web.Response:
    return web.json_response({"error": code, "error_description": description}, status=status)
