"""Pods kept for hours, as compressed JSON.

A node keeps every pod it runs between syncs, and the status it last decided for
each (vkpy.node.pods.pod_record). As JSON a pod is about 2 KiB and its status about
1 KiB, and at 1000 nodes with 10 pods each they were the largest part of the agent's
memory by tracemalloc: 35 of its 99 MiB (docs/scale.md, issue 30). Most of those
bytes are the same in every pod: the field names, and what the API server fills in
(the service account's volume, tolerations, `terminationMessagePath`, conditions).

So they are kept deflated (zlib, the standard library's) against a preset dictionary
made of such a pod and such a status: what every pod repeats costs a back-reference
of a few bits, and a pod keeps little more than its names, uids and times. The
dictionary is fixed in this file, not learnt from the pods seen, so any packed value
unpacks the same in any process. Raw deflate (no zlib header or checksum: these never
leave the process) with an 8 KiB window and small hash tables keeps the compressor's
own set-up small, since every value is packed on its own.
"""

from __future__ import annotations

import zlib
from typing import Any

import orjson

_TIME = "2026-01-01T00:00:00Z"
_UID = "00000000-0000-0000-0000-000000000000"


def _conditions(**extra: object) -> list[dict[str, object]]:
    return [
        {"type": kind, "status": "True", **extra, "lastTransitionTime": _TIME}
        for kind in (
            "PodReadyToStartContainers",
            "Initialized",
            "ContainersReady",
            "Ready",
            "PodScheduled",
        )
    ]


_API_POD = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {
        "creationTimestamp": _TIME,
        "generateName": "app-7d4b9c8f5d-",
        "generation": 1,
        "labels": {"app": "app", "pod-template-hash": "7d4b9c8f5d"},
        "name": "app-7d4b9c8f5d-abcde",
        "namespace": "default",
        "ownerReferences": [
            {
                "apiVersion": "apps/v1",
                "blockOwnerDeletion": True,
                "controller": True,
                "kind": "ReplicaSet",
                "name": "app-7d4b9c8f5d",
                "uid": _UID,
            }
        ],
        "resourceVersion": "1",
        "uid": _UID,
    },
    "spec": {
        "containers": [
            {
                "image": "app:1",
                "imagePullPolicy": "IfNotPresent",
                "name": "app",
                "ports": [{"containerPort": 80, "protocol": "TCP"}],
                "resources": {
                    "limits": {"cpu": "1", "memory": "1Gi"},
                    "requests": {"cpu": "100m", "memory": "64Mi"},
                },
                "terminationMessagePath": "/dev/termination-log",
                "terminationMessagePolicy": "File",
                "volumeMounts": [
                    {
                        "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount",
                        "name": "kube-api-access-abcde",
                        "readOnly": True,
                    }
                ],
            }
        ],
        "dnsPolicy": "ClusterFirst",
        "enableServiceLinks": True,
        "nodeName": "vkpy-node",
        "nodeSelector": {"type": "virtual-kubelet"},
        "preemptionPolicy": "PreemptLowerPriority",
        "priority": 0,
        "restartPolicy": "Always",
        "schedulerName": "default-scheduler",
        "securityContext": {},
        "serviceAccount": "default",
        "serviceAccountName": "default",
        "terminationGracePeriodSeconds": 30,
        "tolerations": [
            {"key": "virtual-kubelet.io/provider", "operator": "Exists"},
            {
                "effect": "NoExecute",
                "key": "node.kubernetes.io/not-ready",
                "operator": "Exists",
                "tolerationSeconds": 300,
            },
            {
                "effect": "NoExecute",
                "key": "node.kubernetes.io/unreachable",
                "operator": "Exists",
                "tolerationSeconds": 300,
            },
        ],
        "volumes": [
            {
                "name": "kube-api-access-abcde",
                "projected": {
                    "defaultMode": 420,
                    "sources": [
                        {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                        {
                            "configMap": {
                                "items": [{"key": "ca.crt", "path": "ca.crt"}],
                                "name": "kube-root-ca.crt",
                            }
                        },
                        {
                            "downwardAPI": {
                                "items": [
                                    {
                                        "fieldRef": {
                                            "apiVersion": "v1",
                                            "fieldPath": "metadata.namespace",
                                        },
                                        "path": "namespace",
                                    }
                                ]
                            }
                        },
                    ],
                },
            }
        ],
    },
    "status": {
        "conditions": _conditions(lastProbeTime=None, observedGeneration=1),
        "containerStatuses": [
            {
                "containerID": "vkpy://" + _UID,
                "image": "app:1",
                "imageID": "",
                "lastState": {},
                "name": "app",
                "ready": True,
                "restartCount": 0,
                "started": True,
                "state": {"running": {"startedAt": _TIME}},
            }
        ],
        "hostIP": "10.0.0.1",
        "hostIPs": [{"ip": "10.0.0.1"}],
        "phase": "Running",
        "podIP": "10.0.0.2",
        "podIPs": [{"ip": "10.0.0.2"}],
        "qosClass": "Burstable",
        "startTime": _TIME,
    },
}
"""A pod as the API server writes it (keys sorted, defaults filled in)."""

_DECIDED_STATUS = {
    "phase": "Running",
    "reason": None,
    "message": None,
    "hostIP": "10.0.0.1",
    "hostIPs": [{"ip": "10.0.0.1"}],
    "podIP": "10.0.0.2",
    "podIPs": [{"ip": "10.0.0.2"}],
    "startTime": _TIME,
    "containerStatuses": [
        {
            "name": "app",
            "image": "app:1",
            "imageID": "",
            "ready": True,
            "started": True,
            "restartCount": 0,
            "state": {"running": {"startedAt": _TIME}},
            "lastState": {},
        }
    ],
    "conditions": _conditions(lastProbeTime=None),
}
"""A status as vkpy decides it (its own key order)."""

DICTIONARY = orjson.dumps(_API_POD, option=orjson.OPT_SORT_KEYS) + orjson.dumps(_DECIDED_STATUS)

_WBITS = -13
"""Raw deflate with an 8 KiB window: a pod's every byte can reach back to the start of
the dictionary (4 KiB), so each part of it finds its like (with 4 KiB, a running pod
of 2.8 KiB packed to 956 bytes instead of 389)."""
_MEM_LEVEL = 4


def pack(value: object) -> bytes:
    """`value` as JSON, deflated against the dictionary."""
    compressor = zlib.compressobj(1, zlib.DEFLATED, _WBITS, _MEM_LEVEL, zdict=DICTIONARY)
    return compressor.compress(orjson.dumps(value)) + compressor.flush()


def json_of(packed: bytes) -> bytes:
    """The JSON that `pack` was given."""
    return zlib.decompressobj(_WBITS, zdict=DICTIONARY).decompress(packed)


def unpack(packed: bytes) -> Any:
    """The value that `pack` was given, decoded afresh."""
    return orjson.loads(json_of(packed))
