"""The kubelet's behaviour: the Node and its Lease, the pods bound to it, their status."""
