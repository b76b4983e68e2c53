"""Talking to the Kubernetes API server: requests, watches, patches, events.

Knows nothing of providers, pods' backends or the kubelet API.

Modules:
- access: How to reach and authenticate to the API server: kubeconfig and in-cluster,
  read here.
- client: A small raw-JSON client for the Kubernetes API server.
- events: Kubernetes Events for pods and the Node, deduplicated and rate limited.
- lean_pool: Kept-alive HTTP/1.1 connections for the heartbeat client's small
  requests.
- node_address: The address this host has towards the API server: the node's default
  InternalIP.
- tls_pool: The API client's connections with a small TLS read buffer.
- watch: List-then-watch of one kind of object, resumed from the last resourceVersion.
"""
