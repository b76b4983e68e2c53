"""vkpy: a virtual kubelet in Python.

vkpy registers a Node with a Kubernetes API server, runs the pods bound to it on a
backend that is not a container runtime, reports their status, and serves the kubelet
HTTPS API so that kubectl logs/exec/port-forward/top work on those pods.
"""

__version__ = "0.1.0"
