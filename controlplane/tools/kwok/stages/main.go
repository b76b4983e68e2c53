// Command kwok-stages prints the Stage objects kwok's own module ships as its defaults
// (node initialization, node heartbeat with a Lease, pod ready, complete and delete), as
// one multi-document YAML for `kwok --config`. The kwok binary starts with no stages unless
// given some; kwokctl adds these same defaults, and bench/peers.py runs kwok as kwokctl
// would, without a copy of their text in this repository.
package main

import (
	"fmt"
	"strings"

	nodefast "sigs.k8s.io/kwok/kustomize/stage/node/fast"
	nodelease "sigs.k8s.io/kwok/kustomize/stage/node/heartbeat-with-lease"
	podfast "sigs.k8s.io/kwok/kustomize/stage/pod/fast"
)

func main() {
	docs := []string{
		nodefast.DefaultNodeInit,
		nodelease.DefaultNodeHeartbeatWithLease,
		podfast.DefaultPodReady,
		podfast.DefaultPodComplete,
		podfast.DefaultPodDelete,
	}
	for i, doc := range docs {
		if i > 0 {
			fmt.Println("---")
		}
		fmt.Println(strings.TrimSpace(doc))
	}
}
