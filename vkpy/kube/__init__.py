"""Talking to the Kubernetes API server: requests, watches, patches, events.

Knows nothing of providers, pods' backends or the kubelet API."""
