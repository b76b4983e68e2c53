"""The kubelet HTTPS API on :10250: TLS, authentication, authorization, and the
endpoints the API server and metrics-server call (logs, exec, stats, metrics)."""
