"""The kubelet HTTPS API on :10250: TLS, authentication, authorization, and the
endpoints the API server and metrics-server call (logs, exec, stats, metrics).

Entry point: `KubeletServer(ApiSettings, ApiDependencies).run()`, started by the
runner. Modules: server (lifecycle), listener (connection deadlines and caps),
audit (exec/attach/port-forward records), stream_io (what backends stream through),
tls_options (versions and suites), ws_masking (RFC 6455 client masks),
routes (URL map), middleware (authn/authz on
every route), authn, authz, ttl_cache, logs and log_options (containerLogs), stats
and resource_metrics, tls, certs, serving and csr (the serving certificate),
client_ca (the default client CA), config and state (settings and typed app state).
"""

from vkpy.api.config import AUTHORIZATION_MODES, ApiDependencies, ApiSettings, AuthorizationMode
from vkpy.api.listener import ListenError
from vkpy.api.server import KubeletServer

__all__ = [
    "AUTHORIZATION_MODES",
    "ApiDependencies",
    "ApiSettings",
    "AuthorizationMode",
    "KubeletServer",
    "ListenError",
]
