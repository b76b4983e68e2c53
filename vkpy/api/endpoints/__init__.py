"""The kubelet API's endpoints beyond the URL map's small handlers: logs, exec and
attach, port-forward, /pods, stats and resource metrics.

Modules:
- exec_attach: `/exec` and `/attach`: remote commands over SPDY/3.1 or a WebSocket
  channel protocol.
- log_options: The query of `GET /containerLogs/...`, decoded and checked as the kubelet
  does.
- logs: `GET /containerLogs/{namespace}/{pod}/{container}`: container logs, streamed.
- pod_list: The kubelet API's `/pods` body, built from each pod's JSON encoded once.
- portforward: `/portForward`: forwarded TCP connections over SPDY/3.1 or a WebSocket
  channel protocol.
- resource_metrics: `/metrics/resource`: the Prometheus text metrics-server scrapes for
  `kubectl top`.
- stats: `/stats/summary`: the backend's CPU and memory samples as a stats/v1alpha1
  Summary.
"""
