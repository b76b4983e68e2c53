"""Pods kept compressed: what goes in comes out, and a pod as the API server writes
it keeps a fraction of its JSON (issue 30: the kept JSON was the largest part of the
agent's memory at 1000 nodes with 10 pods each)."""

from __future__ import annotations

from typing import Any

import orjson

from vkpy.core import packed_json


def api_pod(name: str, uid: str) -> dict[str, Any]:
    """A running pod as the dev cluster's API server returned it (a Deployment's
    replica, managedFields dropped) with the status vkpy wrote: keys sorted."""
    conditions = [
        {
            "lastProbeTime": None,
            "lastTransitionTime": "2026-12-06T00:12:09Z",
            "status": "True",
            "type": kind,
        }
        for kind in ("PodReadyToStartContainers", "Initialized", "ContainersReady", "Ready")
    ]
    token = f"kube-api-access-{uid[:5]}"
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "creationTimestamp": "2026-12-06T00:12:07Z",
            "generateName": "web-9dcd46c5c-",
            "generation": 1,
            "labels": {"app": "web", "pod-template-hash": "9dcd46c5c"},
            "name": name,
            "namespace": "default",
            "ownerReferences": [
                {
                    "apiVersion": "apps/v1",
                    "blockOwnerDeletion": True,
                    "controller": True,
                    "kind": "ReplicaSet",
                    "name": "web-9dcd46c5c",
                    "uid": "d48e3ce8-1322-448d-a4b6-e291db63cc68",
                }
            ],
            "resourceVersion": "270",
            "uid": uid,
        },
        "spec": {
            "containers": [
                {
                    "image": "nginx:alpine",
                    "imagePullPolicy": "IfNotPresent",
                    "name": "nginx",
                    "ports": [{"containerPort": 80, "protocol": "TCP"}],
                    "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}},
                    "terminationMessagePath": "/dev/termination-log",
                    "terminationMessagePolicy": "File",
                    "volumeMounts": [
                        {
                            "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount",
                            "name": token,
                            "readOnly": True,
                        }
                    ],
                }
            ],
            "dnsPolicy": "ClusterFirst",
            "enableServiceLinks": True,
            "nodeName": "vk-1",
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
            ],
            "volumes": [
                {
                    "name": token,
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
                        ],
                    },
                }
            ],
        },
        "status": {
            "conditions": conditions,
            "containerStatuses": [
                {
                    "containerID": f"sim://{uid}",
                    "image": "nginx:alpine",
                    "imageID": "",
                    "lastState": {},
                    "name": "nginx",
                    "ready": True,
                    "restartCount": 0,
                    "started": True,
                    "state": {"running": {"startedAt": "2026-12-06T00:12:09Z"}},
                }
            ],
            "hostIP": "198.18.0.1",
            "hostIPs": [{"ip": "198.18.0.1"}],
            "phase": "Running",
            "podIP": "10.42.0.17",
            "podIPs": [{"ip": "10.42.0.17"}],
            "qosClass": "Burstable",
            "startTime": "2026-12-06T00:12:08Z",
        },
    }


def test_what_is_packed_unpacks_equal_and_its_json_byte_for_byte() -> None:
    pod = api_pod("web-9dcd46c5c-m4jw4", "e068f69c-34c0-4cb4-8cdf-ab7379080bd4")
    packed = packed_json.pack(pod)
    assert packed_json.unpack(packed) == pod
    assert packed_json.json_of(packed) == orjson.dumps(pod)
    assert packed_json.unpack(packed) is not packed_json.unpack(packed)  # a fresh copy each
    for odd in (None, [], {}, "ü" * 5000, {"k": list(range(3000))}):
        assert packed_json.unpack(packed_json.pack(odd)) == odd


def test_a_pod_as_the_api_server_writes_it_keeps_under_a_fifth_of_its_json() -> None:
    pod = api_pod("web-9dcd46c5c-m4jw4", "e068f69c-34c0-4cb4-8cdf-ab7379080bd4")
    size = len(orjson.dumps(pod))
    packed = len(packed_json.pack(pod))
    assert packed * 5 < size, (packed, size)
    # the status vkpy decided for it, in the order pod_status writes it
    running = pod["status"]
    status = {
        "phase": "Running",
        "reason": None,
        "message": None,
        **{key: running[key] for key in ("hostIP", "hostIPs", "podIP", "podIPs", "startTime")},
        "containerStatuses": [
            {
                "name": "nginx",
                "image": "nginx:alpine",
                "imageID": "",
                "ready": True,
                "started": True,
                "restartCount": 0,
                "state": {"running": {"startedAt": "2026-12-06T00:12:09Z"}},
                "lastState": {},
            }
        ],
        "conditions": [
            {"type": c["type"], "status": "True", "lastProbeTime": None, "lastTransitionTime": t}
            for c in running["conditions"]
            for t in [c["lastTransitionTime"]]
        ],
    }
    assert len(packed_json.pack(status)) * 5 < len(orjson.dumps(status))


def test_an_unlike_pod_still_packs_smaller_than_its_json() -> None:
    """The dictionary helps only what resembles it; anything else is plain deflate."""
    pod = {"metadata": {"name": "x" * 40, "annotations": {f"a{n}": "v" * n for n in range(60)}}}
    assert len(packed_json.pack(pod)) < len(orjson.dumps(pod))
