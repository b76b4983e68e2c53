"""The kubelet HTTPS API on :10250: TLS, authentication, authorization, and the
endpoints the API server and metrics-server call (logs, exec, stats, metrics).

Entry point: `KubeletServer(ApiSettings, ApiDependencies).run()`, started by the
node host. A new route goes in routes (the URL map) with its handler in endpoints/.

Modules:
- auth/: Who may call the kubelet API and what they may do: every request passes the
  middleware here before a handler runs.
- certs/: The kubelet API's serving certificate and TLS: X.509 work (in a child
  process), CSRs to the cluster and their renewal, the opt-in approver, TLS versions and
  suites.
- endpoints/: The kubelet API's endpoints beyond the URL map's small handlers: logs,
  exec and attach, port-forward, /pods, stats and resource metrics.
- health: The vkpy process's own health, for the liveness and readiness probes of its
  pod.
- listener: Accepting kubelet API connections with the bounds a server on a hostile
  network needs.
- routes: The kubelet API's URL map and its small handlers.
- server: The kubelet HTTPS API server: one aiohttp application inside vkpy's event
  loop.
- settings: Settings of the kubelet HTTPS API, and what the API needs from the rest of
  vkpy.
- state: Typed application state shared by the kubelet API's handlers, and reply
  helpers.
- streaming/: exec, attach and port-forward connections as asyncio sessions over the
  sans-IO codecs of vkpy.streams: SPDY/3.1 after an HTTP upgrade and the WebSocket
  channel protocols, what they hand to backends, and the audit trail.
"""

from vkpy.api.listener import ListenError
from vkpy.api.server import KubeletServer
from vkpy.api.settings import AUTHORIZATION_MODES, ApiDependencies, ApiSettings, AuthorizationMode

__all__ = [
    "AUTHORIZATION_MODES",
    "ApiDependencies",
    "ApiSettings",
    "AuthorizationMode",
    "KubeletServer",
    "ListenError",
]
