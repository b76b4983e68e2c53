"""The `process` backend: each container of a pod runs as a process on this host.

Deliberately empty: the per-container supervisor (`python -m
vkpy.providers.process.supervisor`) and the exec helper import only the small,
standard-library modules of this package, so starting them stays cheap. The provider
itself is in `provider.py`; the design is in docs/process-backend.md.

Modules:
- actions: Probe and lifecycle hook handlers: exec, httpGet, tcpSocket, grpc and sleep.
- addresses: Which pod has which address of the node's pod CIDR (`network: pod`), as
  pure logic.
- backoff: The kubelet's CrashLoopBackOff, as a small pure object.
- beneath: Every file operation vkpy does, as root, in a directory a pod can write.
- cgroups: Memory limits and accounting with Linux control groups, when the host lets
  us.
- config: Settings of the process backend (`--provider-config`), and what they resolve
  to.
- container: One container of a pod: start it, watch it, probe it, restart it, stop it.
- enter: Entering a container's context: its cgroup, its user, its directory and
  environment.
- ephemeral: Ephemeral containers (`kubectl debug`) of the process backend: whose
  context they use.
- filesystem: A pod's files on the host: its volumes, and each container's view of them.
- grpc_probe: gRPC probes: one `grpc.health.v1.Health/Check` call over HTTP/2 cleartext.
- idclaims: Host-wide claims on pod ids, so two nodes on one host never give one id to
  two pods.
- identity: Who a pod's processes are: a uid and gid of the pod's own, kept while it
  exists.
- idranges: Each `runtime: oci` pod's host id range, claimed host-wide and never reused
  early.
- images: Images on a host without a container runtime: what runs for a container's
  image.
- layout: Where a pod's files live under the backend's directory, and how they are
  written.
- leftovers: Ending what a process-backend node left running once the node is gone for
  good.
- listening: Where port-forward may connect: only to a socket a process of the pod
  listens on.
- logfile: Container log files: the CRI line format, and size-based rotation.
- logs: Reading a container's log files for `kubectl logs`: previous, since, tail,
  follow.
- mountcalls: The Linux calls that build a pod's filesystem view, through ctypes.
- namespaces: A pod's own UTS and IPC namespaces: its hostname, and System V IPC of its
  own.
- ocicontainers: One container run of `runtime: oci`: its image pulled, its root
  unpacked, its OCI spec written, and what the supervisor runs: `runc run` in the
  foreground.
- ociephemeral: Ephemeral containers (`kubectl debug`) in `runtime: oci`: whose PID
  namespace.
- ocietc: /etc/hosts, /etc/hostname and /etc/resolv.conf of a `runtime: oci` pod, as
  the kubelet and its container runtime manage them.
- ocigc: Image garbage collection on a `runtime: oci` node, every 5 minutes as the
  kubelet's.
- ocihost: What a `runtime: oci` pod shares with the host: its namespaces and its
  users.
- ocipods: The node's side of `runtime: oci`: runc, the image store, and each pod's
  sandbox.
- owned: What a removed pod's own id still owns outside the pod's directory.
- persist: A pod as the backend was given it, kept on disk so a restarted vkpy can go
  on.
- phase: A pod's phase from its containers' states, by the kubelet's rules (getPhase).
- pod: One pod of the backend: its init sequence, its containers, its state on disk.
- podmounts: A container's volumes at their real `mountPath`, in the pod's mount
  namespace.
- podnet: A pod's own network (`network: pod`): its namespace wired to the node by a
  veth pair.
- podroot: The pod's own root filesystem, built inside its mount namespace by its
  holder.
- privileges: What a pod may ask of the host's privileges, and what its processes then
  keep.
- probes: Startup, liveness and readiness probes with the kubelet's timing and
  thresholds.
- proc: Reading /proc: is this pid still the process we started, and what does it use.
- provider: The `process` backend: pods whose containers run as processes on this host.
- records: The records the provider and a container's supervisor exchange through files.
- runtime: What every pod of the backend shares, and how a container's context is built.
- sandbox: What a pod's filesystem view holds, decided on vkpy's side (root, namespaces
  on).
- seccomp: The last step before a pod's process executes: no new privileges, no
  capabilities, and a seccomp filter refusing the system calls that lead out of the
  sandbox.
- standins/: The images the process backend runs without being told: small host stand-
  ins.
- stats: CPU and memory samples of running containers, for /stats/summary and `kubectl
  top`.
- streams: `kubectl exec`, `attach` and `port-forward` for containers that are host
  processes.
- supervision: vkpy's side of a supervisor: start one, find one again, signal it, wait
  for it.
- supervisor: The per-container supervisor: owns one run of a container, outlives vkpy.
- sysctls: A pod's sysctls (`securityContext.sysctls`), set in the pod's own namespaces.
- termination: Termination messages: what a container leaves in
  `terminationMessagePath`, or the end of its log, as the message of its terminated
  state (the kubelet's rules).
- validation: What the process backend can run, checked before anything of a pod starts.
"""
