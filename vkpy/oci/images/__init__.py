"""Images as a kubelet pulls them, on maintained tools: skopeo speaks the registry
protocol (tags, digests, multi-arch indexes, auth, mirrors, digest checks) and umoci
unpacks layers (whiteouts, id maps) out of one OCI image layout per node.

What is hand-written here is only what those tools do not know: the kubelet's rules
(reference normalisation, pull policy, pull-secret matching, back-off, image GC, how
an image's config combines with a container's command/args/env) and the bookkeeping
of the node's store (last use, repository digests).

- `reference`: image references normalised as the kubelet does.
- `credentials`: dockerconfigjson/dockercfg pull secrets, matched to a registry host.
- `registries`: per-host mirrors, as a containers-registries.conf(5) file for skopeo.
- `store`: the node's content-addressed store (an OCI image layout) and its index.
- `pull`: imagePullPolicy, credentials, platform; typed errors; size and duration.
- `backoff`: the image pull back-off (10 s doubling to 5 min).
- `messages`: the kubelet's words for Pulling/Pulled/Failed/BackOff events.
- `config`: an image's config (Entrypoint, Cmd, Env, WorkingDir, User), typed.
- `container`: Kubernetes' rules for combining it with command/args/env.
- `unpack`: a pod's root filesystem unpacked with its id map, and removed.
- `gc`: image garbage collection at the kubelet's disk thresholds.
- `importer` and `command`: `python -m vkpy images import FILE`.
"""
