"""OCI images and the OCI runtime, for the embedded (process) backend.

A kubelet user expects `image:` to mean an image. This package holds the parts that
make it so, on maintained tools rather than hand-written ones:

- `vkpy.oci.images`: references as the kubelet reads them, the node's
  content-addressed image store, pulls (skopeo) with pull secrets and mirrors,
  unpacking (umoci), garbage collection and the air-gapped import command.
- `vkpy.oci.runtime`: an OCI runtime spec generated from a pod's container, and the
  OCI runtime (runc) that runs it in the pod's user and network namespaces.

It knows nothing of the API server, the node or the kubelet API: the process backend
uses it through plain data.
"""
