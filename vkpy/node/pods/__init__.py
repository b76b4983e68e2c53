"""The pod loop: the pods bound to this node, each one's life step by step from its
record, and the status and Events written for it (start at pod_controller, then
pod_life; pod_reporting writes the status).

Modules:
- backend_events: Events a backend reports about its pods, written as the kubelet writes
  its own.
- cannot_start: What the kubelet shows for a pod whose containers cannot start, and when
  it tries again.
- deadline: activeDeadlineSeconds: when a pod has run too long, and what it looks like
  after.
- deletion_cost: Opt-in `controller.kubernetes.io/pod-deletion-cost` on the pods of this
  node.
- keyed_queue: A work queue that never runs two operations on one pod at once.
- lost: What the kubelet reports for a pod whose containers vanished from under it.
- next_wake: What wakes a pod's sync next, read from its record after each sync.
- pod_conditions: The four pod conditions the kubelet derives from container statuses,
  in its words.
- pod_controller: The kubelet's pod loop: run what is bound to this node, report what
  became of it.
- pod_life: One pod's life on this node: each step of `sync`, from its record.
- pod_record: Everything the pod controller knows about one pod, in one record.
- pod_reporting: Telling the API server what became of a pod: status patches and Events,
  and knowing our own writes when the watch brings them back.
- pod_status: Turning a backend's view of a pod into the pod status the kubelet would
  write.
- polling: Polling, as an adapter: a backend that cannot push is made to push.
- running_pods: The kubelet API's /runningpods/, from what the backend actually runs.
- shared_pod_watch: One pod watch for every node of this process, routed to each node by
  spec.nodeName.
- terminating: Status keeps being written while a pod is being stopped.
"""
