"""The OCI runtime side of the embedded backend: a pod's containers run by runc.

- `spec`: an OCI runtime spec (config.json) from plain data describing a container
  (pure: its inputs are what a pod's container and the node decide).
- `seccomp`: the runtime default seccomp profile (the one CRI-O and podman ship in
  containers-common) turned into the spec's `linux.seccomp` for one container.
- `runc`: an asyncio wrapper over the runc binary, with a per-node state directory.
- `sandbox`: a pod sandbox, the namespaces a pod's containers share, held by a
  sandbox container as the CRI's pause container holds them.
- `console`: the pseudo-terminal runc hands over for `tty: true` and `exec -t`.
"""
