"""The pod -> container group mapping of the `aci` backend, and group -> pod state."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import pytest
import yaml
from azure.mgmt.containerinstance import models as m

from tests.aci_emulator import limits
from vkpy.providers import owner_tags
from vkpy.providers.aci import AciProvider, group_spec, naming, status
from vkpy.providers.aci.config import AciConfig
from vkpy.providers.base import (
    ContainerConfig,
    PodConfig,
    PodRef,
    RegistryCredential,
    VolumeConfig,
    VolumeFile,
)
from vkpy.providers.errors import AdmissionError, InvalidInputError

REF = PodRef("team-a", "web", "6f1c2d3e-0000-4000-8000-000000000001")


def config(**overrides: Any) -> AciConfig:
    return AciConfig.from_dict(
        {"subscription_id": "s", "resource_group": "rg", "region": "westeurope", **overrides}
    )


def container(name: str = "app", **spec: Any) -> ContainerConfig:
    env = tuple(spec.pop("resolved_env", ()))
    return ContainerConfig(
        name=name,
        image=spec.pop("image", "nginx"),
        command=tuple(spec.pop("command", ())),
        args=tuple(spec.pop("args", ())),
        env=env,
        working_dir=spec.pop("workingDir", None),
        spec={"name": name, **spec},
    )


def pod(
    *containers: ContainerConfig, annotations: dict[str, str] | None = None, **kwargs: Any
) -> PodConfig:
    spec = {"restartPolicy": kwargs.pop("restart_policy", "Always"), **kwargs.pop("spec", {})}
    return PodConfig(
        ref=REF,
        pod={
            "metadata": {
                "name": REF.name,
                "namespace": REF.namespace,
                "annotations": annotations or {},
                "labels": {"app": "web"},
            },
            "spec": spec,
        },
        init_containers=tuple(kwargs.pop("inits", ())),
        containers=containers or (container(),),
        volumes=tuple(kwargs.pop("volumes", ())),
        registry_credentials=tuple(kwargs.pop("registry_credentials", ())),
    )


def build(p: PodConfig, **overrides: Any) -> group_spec.GroupSpec:
    return group_spec.build(p, config(**overrides), "vk-1")


def test_group_name_fits_acis_rules_and_differs_per_uid() -> None:
    long = PodRef("Some_Namespace", "x" * 80, "ABCDEF12-3456")
    name = naming.group_name(long)
    assert len(name) <= 63 and name == name.lower() and "--" not in name
    assert name.endswith("-abcdef12")
    assert naming.group_name(REF) == "team-a-web-6f1c2d3e"
    assert naming.group_name(PodRef("team-a", "web", "99")) != naming.group_name(REF)


def test_containers_command_env_ports_and_rounded_resources() -> None:
    app = container(
        command=["python", "-m", "http.server"],
        args=["8080"],
        ports=[
            {"containerPort": 8080, "protocol": "TCP"},
            {"containerPort": 53, "protocol": "UDP"},
        ],
        env=[
            {"name": "MODE", "value": "x"},
            {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}},
        ],
        resolved_env=[("MODE", "x"), ("TOKEN", "hunter2")],
        resources={
            "requests": {"cpu": "333m", "memory": "1Gi"},
            "limits": {"cpu": "1", "memory": "2Gi"},
        },
    )
    spec = build(pod(app))
    c = spec.group.containers[0]
    assert c.command == ["python", "-m", "http.server", "8080"]
    assert [(e.name, e.value, e.secure_value) for e in c.environment_variables] == [
        ("MODE", "x", None),
        ("TOKEN", None, "hunter2"),
    ]
    assert (c.resources.requests.cpu, c.resources.requests.memory_in_gb) == (0.34, 1.1)
    assert (c.resources.limits.cpu, c.resources.limits.memory_in_gb) == (1.0, 2.2)
    assert [(p.port, p.protocol) for p in c.ports] == [(8080, "TCP"), (53, "UDP")]
    assert spec.group.ip_address.type == "Public"
    assert [p.port for p in spec.group.ip_address.ports] == [8080, 53]
    assert any("0.34" in n for n in spec.notes) and any("1.1 GB" in n for n in spec.notes)
    assert "hunter2" not in " ".join(spec.notes)
    tags = spec.group.tags
    assert (
        tags[owner_tags.NODE] == "vk-1" and tags[owner_tags.UID] == REF.uid and tags["app"] == "web"
    )
    assert owner_tags.owner(tags, "vk-1") == REF and owner_tags.owner(tags, "other") is None


def test_env_from_a_secret_is_secure_but_explicit_values_are_not() -> None:
    app = container(
        env=[{"name": "PLAIN", "value": "1"}],
        envFrom=[{"secretRef": {"name": "creds"}}],
        resolved_env=[("PASSWORD", "p"), ("PLAIN", "1")],
    )
    env = build(pod(app)).group.containers[0].environment_variables
    assert {e.name: (e.value, e.secure_value) for e in env} == {
        "PASSWORD": (None, "p"),
        "PLAIN": ("1", None),
    }


def test_args_without_command_cannot_be_expressed() -> None:
    with pytest.raises(InvalidInputError, match="args without a command"):
        build(pod(container(args=["--port", "80"])))


def test_missing_requests_get_the_defaults_with_a_note() -> None:
    spec = build(pod(container()))
    requests = spec.group.containers[0].resources.requests
    assert (requests.cpu, requests.memory_in_gb) == (1.0, 1.5)
    assert any("no CPU request" in n for n in spec.notes)


def test_init_containers_probes_and_restart_policy() -> None:
    init = container("setup", command=["sh", "-c", "true"])
    app = container(
        ports=[{"name": "http", "containerPort": 80}],
        livenessProbe={"httpGet": {"path": "/healthz", "port": "http"}, "periodSeconds": 5},
        readinessProbe={"exec": {"command": ["cat", "/ready"]}, "failureThreshold": 2},
        startupProbe={"tcpSocket": {"port": 80}},
    )
    spec = build(pod(app, inits=[init], restart_policy="OnFailure"))
    group = spec.group
    assert group.restart_policy == "OnFailure"
    assert [c.name for c in group.init_containers] == ["setup"]
    assert group.init_containers[0].command == ["sh", "-c", "true"]
    live = group.containers[0].liveness_probe
    assert (live.http_get.path, live.http_get.port, live.period_seconds) == ("/healthz", 80, 5)
    ready = group.containers[0].readiness_probe
    assert ready.exec_property.command == ["cat", "/ready"] and ready.failure_threshold == 2
    assert any("startup probes" in n for n in spec.notes)


def test_volumes_emptydir_files_and_azure_file() -> None:
    token = VolumeConfig(
        "kube-api-access",
        "projected",
        files=(VolumeFile("token", b"jwt"), VolumeFile("ca.crt", b"pem")),
    )
    scratch = VolumeConfig("scratch", "emptyDir")
    share = VolumeConfig("share", "emptyDir")
    app = container(
        volumeMounts=[
            {"name": "scratch", "mountPath": "/tmp/s"},
            {"name": "share", "mountPath": "/mnt/share", "readOnly": True},
        ]
    )
    p = pod(
        app,
        volumes=[token, scratch, share],
        annotations={"vkpy.io/aci-azure-file.share": "acct/files:ro"},
    )
    group = build(p, storage_account_keys={"acct": "a2V5"}).group
    volumes = {v.name: v for v in group.volumes}
    assert volumes["kube-api-access"].secret == {
        "token": base64.b64encode(b"jwt").decode(),
        "ca.crt": base64.b64encode(b"pem").decode(),
    }
    assert volumes["scratch"].empty_dir == {}
    assert volumes["share"].azure_file.share_name == "files"
    assert volumes["share"].azure_file.storage_account_key == "a2V5"
    assert volumes["share"].azure_file.read_only is True
    mounts = group.containers[0].volume_mounts
    assert [(v.name, v.mount_path, v.read_only) for v in mounts] == [
        ("scratch", "/tmp/s", None),
        ("share", "/mnt/share", True),
    ]


@pytest.mark.parametrize("kind", ["hostPath", "persistentVolumeClaim", "nfs"])
def test_other_volumes_fail_with_unsupported_volume(kind: str) -> None:
    with pytest.raises(InvalidInputError) as failure:
        build(pod(container(), volumes=[VolumeConfig("data", kind)]))
    assert failure.value.reason == "UnsupportedVolume"


def test_file_volume_with_directories_is_unsupported() -> None:
    cm = VolumeConfig("cfg", "configMap", files=(VolumeFile("a/b.conf", b"x"),))
    with pytest.raises(InvalidInputError) as failure:
        build(pod(container(), volumes=[cm]))
    assert failure.value.reason == "UnsupportedVolume"


def test_gpu_picks_the_sku_and_checks_counts() -> None:
    gpu = container(resources={"limits": {"nvidia.com/gpu": "2", "cpu": "4", "memory": "8G"}})
    group = build(pod(gpu), gpu_sku="V100").group
    requested = group.containers[0].resources.requests.gpu
    assert (requested.count, requested.sku) == (2, "V100")
    by_annotation = build(pod(gpu, annotations={"vkpy.io/aci-gpu-sku": "P100"})).group
    assert by_annotation.containers[0].resources.requests.gpu.sku == "P100"
    with pytest.raises(InvalidInputError, match="no GPU SKU"):
        build(pod(gpu))
    three = container(resources={"limits": {"nvidia.com/gpu": "3"}})
    with pytest.raises(InvalidInputError, match="not 3"):
        build(pod(three), gpu_sku="K80")


def test_subnet_gives_a_private_ip_and_dns_label_prefix_a_public_name() -> None:
    app = container(ports=[{"containerPort": 80}])
    private = build(pod(app), network={"subnet_ids": ["/subscriptions/s/x/subnets/aci"]}).group
    assert private.ip_address.type == "Private"
    assert private.subnet_ids[0].id.endswith("/subnets/aci")
    public = build(pod(app), network={"dns_label_prefix": "vk"}).group
    assert public.ip_address.dns_name_label == "vk-web"
    labelled = build(pod(app, annotations={"vkpy.io/aci-dns-label": "shop"})).group
    assert labelled.ip_address.dns_name_label == "shop"


def test_windows_node_spot_confidential_identity_and_registry_logins() -> None:
    windows = group_spec.build(pod(container()), config(), "vk-1")
    assert windows.group.os_type == "Linux"
    on_windows = group_spec.build(
        pod(container()),
        AciConfig.from_dict(
            {"subscription_id": "s", "resource_group": "rg", "region": "r"}, os_type="windows"
        ),
        "n",
    )
    assert on_windows.group.os_type == "Windows"
    with pytest.raises(AdmissionError, match="asks for linux") as other_os:  # Failed
        group_spec.build(
            pod(container(), spec={"nodeSelector": {"kubernetes.io/os": "linux"}}),
            AciConfig.from_dict(
                {"subscription_id": "s", "resource_group": "rg", "region": "r"}, os_type="windows"
            ),
            "n",
        )
    assert other_os.value.reason == "NodeAffinity"
    p = pod(
        container(ports=[{"containerPort": 80}]),
        annotations={
            "vkpy.io/aci-priority": "Spot",
            "vkpy.io/aci-identity": "/subscriptions/s/identities/one",
        },
        registry_credentials=[RegistryCredential("myregistry.azurecr.io", "u", "p")],
    )
    group = build(p).group
    assert group.priority == "Spot" and group.ip_address is None  # Spot groups have no IP
    assert group.identity.type == "UserAssigned"
    assert list(group.identity.user_assigned_identities) == ["/subscriptions/s/identities/one"]
    creds = group.image_registry_credentials[0]
    assert (creds.server, creds.username, creds.password) == ("myregistry.azurecr.io", "u", "p")
    confidential = build(
        pod(
            container(),
            annotations={"vkpy.io/aci-sku": "Confidential", "vkpy.io/aci-cce-policy": "cG9s"},
        )
    ).group
    assert confidential.sku == "Confidential"
    assert confidential.confidential_compute_properties.cce_policy == "cG9s"
    assert build(pod(container()), spot=True).group.priority == "Spot"


def test_spec_digest_changes_with_the_spec() -> None:
    a = build(pod(container(image="nginx:1")))
    b = build(pod(container(image="nginx:2")))
    assert a.digest != b.digest and a.group.tags[group_spec.SPEC_TAG] == a.digest


def _group(
    state: str | None,
    provisioning: str = "Succeeded",
    container_view: dict[str, Any] | None = None,
    events: list[dict[str, Any]] | None = None,
) -> m.ContainerGroup:
    """A group as ARM answers it (read-only fields set, as only the service can)."""
    app: dict[str, Any] = {
        "name": "app",
        "properties": {"image": "nginx", "resources": {"requests": {"cpu": 1, "memoryInGB": 1}}},
    }
    if container_view is not None:
        app["properties"]["instanceView"] = container_view
    props: dict[str, Any] = {
        "provisioningState": provisioning,
        "osType": "Linux",
        "restartPolicy": "Always",
        "containers": [app],
    }
    if state is not None:
        props["instanceView"] = {"state": state, "events": events or []}
    return m.ContainerGroup.deserialize({"location": "x", "properties": props})


def test_status_deploying_running_and_crash_looping() -> None:
    pending = status.pod_state(_group(None, provisioning="Creating"))
    assert pending.phase == "Pending"
    assert pending.containers[0].reason == "ContainerCreating"
    running = status.pod_state(
        _group("Running", container_view={"currentState": {"state": "Running"}, "restartCount": 0})
    )
    assert running.phase == "Running" and running.containers[0].state == "running"
    looping = status.pod_state(
        _group(
            "Running",
            container_view={
                "currentState": {"state": "Terminated", "exitCode": 3, "detailStatus": "Error"},
                "previousState": {"state": "Terminated", "exitCode": 3},
                "restartCount": 2,
            },
        )
    )
    app = looping.containers[0]
    assert (app.state, app.reason, app.restart_count) == ("waiting", "CrashLoopBackOff", 2)
    assert app.last_terminated is not None and app.last_terminated.exit_code == 3


def test_status_failed_deployment_and_spot_eviction() -> None:
    failed = _group(
        "Failed",
        provisioning="Failed",
        container_view={
            "events": [
                {"name": "Failed", "type": "Warning", "message": "image 'x' is not accessible"}
            ]
        },
    )
    state = status.pod_state(failed)
    assert state.phase == "Failed" and "not accessible" in (state.message or "")
    evicted = _group(
        "Stopped",
        container_view={"currentState": {"state": "Running"}},
        events=[
            {
                "name": "SpotContainerGroupEvicted",
                "message": "capacity taken back",
                "type": "Warning",
            }
        ],
    )
    state = status.pod_state(evicted)
    assert (state.phase, state.reason) == ("Failed", "Evicted")
    assert state.containers[0].state == "terminated"


def test_config_refuses_unknown_keys_and_bad_credentials() -> None:
    with pytest.raises(ValueError, match="unknown setting"):
        config(pol_interval=1)
    with pytest.raises(ValueError, match="client_secret credentials need"):
        config(credentials={"type": "client_secret", "tenant_id": "t"})
    with pytest.raises(ValueError, match="gpu_sku"):
        config(gpu_sku="A100")


def test_the_example_config_is_valid() -> None:
    raw = yaml.safe_load((Path(__file__).parents[4] / "examples/aci-provider.yaml").read_text())
    parsed = AciConfig.from_dict(raw)
    assert parsed.resource_group == "vkpy-aci" and parsed.credentials.kind == "default"


def test_dns_config_from_the_pod_else_the_nodes() -> None:
    node_dns = {"dns_servers": ["10.0.0.10"], "dns_search_domains": ["svc.cluster.local"]}
    assert build(pod(container())).group.dns_config is None
    nodes = build(pod(container()), network=node_dns).group.dns_config
    assert (nodes.name_servers, nodes.search_domains) == (["10.0.0.10"], "svc.cluster.local")
    own = pod(
        container(),
        spec={
            "dnsConfig": {
                "nameservers": ["1.1.1.1"],
                "searches": ["a.example", "b.example"],
                "options": [{"name": "ndots", "value": "2"}, {"name": "edns0"}],
            }
        },
    )
    dns = build(own, network=node_dns).group.dns_config
    assert (dns.name_servers, dns.search_domains, dns.options) == (
        ["1.1.1.1"],
        "a.example b.example",
        "ndots:2 edns0",
    )


def test_the_node_advertises_gpus_only_when_configured() -> None:
    plain = AciProvider(config(), "vk-1").node_resources()
    assert "nvidia.com/gpu" not in plain.capacity and "nvidia.com/gpu" not in plain.allocatable
    gpus = AciProvider(config(gpu_capacity=8, gpu_sku="V100"), "vk-1").node_resources()
    assert gpus.capacity["nvidia.com/gpu"] == gpus.allocatable["nvidia.com/gpu"] == "8"


def test_an_in_tree_azure_file_volume_is_a_share_with_its_secrets_account_and_key() -> None:
    secret = (
        VolumeFile("azurestorageaccountname", b"acct"),
        VolumeFile("azurestorageaccountkey", b"a2V5"),
    )
    source = {"secretName": "storage", "shareName": "files", "readOnly": True}
    share = VolumeConfig("data", "azureFile", source=source, files=secret)
    mounted = container(volumeMounts=[{"name": "data", "mountPath": "/data"}])
    (volume,) = build(pod(mounted, volumes=[share])).group.volumes
    share_of = volume.azure_file
    assert (share_of.storage_account_name, share_of.share_name) == ("acct", "files")
    assert share_of.read_only is True and share_of.storage_account_key == "a2V5"
    keyless = VolumeConfig("data", "azureFile", source=source, files=secret[:1])
    keys = {"acct": "a2V5"}  # a Secret without the key: the node's storage_account_keys
    (volume,) = build(pod(mounted, volumes=[keyless]), storage_account_keys=keys).group.volumes
    assert volume.azure_file.storage_account_key == "a2V5"
    with pytest.raises(InvalidInputError) as failure:  # no key anywhere
        build(pod(mounted, volumes=[keyless]))
    assert failure.value.reason == "UnsupportedVolume"


EXAMPLES = Path(__file__).parents[4] / "examples"


def example_pod(name: str) -> PodConfig:
    """An example manifest as the kubelet side hands it to the backend."""
    manifest = yaml.safe_load((EXAMPLES / name).read_text())
    meta = {**manifest["metadata"], "namespace": "default"}
    containers = tuple(
        ContainerConfig(
            name=c["name"],
            image=c["image"],
            command=tuple(c.get("command") or ()),
            args=tuple(c.get("args") or ()),
            spec=c,
        )
        for c in manifest["spec"]["containers"]
    )
    ref = PodRef("default", meta["name"], "0b5e7c1a-0000-4000-8000-00000000e4a1")
    return PodConfig(ref, {**manifest, "metadata": meta}, (), containers)


@pytest.mark.parametrize(
    ("example", "node"),
    [
        ("aci-hello.yaml", {}),
        ("aci-gpu.yaml", {"gpu_capacity": 4}),
        ("aci-windows.yaml", {"os_type": "windows"}),
    ],
)
def test_the_example_pods_make_groups_aci_accepts(example: str, node: dict[str, Any]) -> None:
    p = example_pod(example)
    spec = p.pod["spec"]
    assert spec["nodeSelector"]["type"] == "virtual-kubelet"
    assert spec["tolerations"][0]["key"] == "virtual-kubelet.io/provider"
    made = build(p, **node)
    assert limits.missing_required(made.group) == []
    limits.check_group(made.group, made.name)  # as the emulator (ACI's rules) checks it
    if example == "aci-hello.yaml":  # the seed: 0.5 CPU / 1Gi
        requests = made.group.containers[0].resources.requests
        assert (requests.cpu, requests.memory_in_gb) == (0.5, 1.1)
        assert made.group.ip_address.type == "Public"
    if example == "aci-gpu.yaml":
        gpu = made.group.containers[0].resources.requests.gpu
        assert (gpu.count, gpu.sku) == (1, "V100")
    if example == "aci-windows.yaml":
        assert made.group.os_type == "Windows"


def test_status_running_since_a_stopped_group_and_a_finished_one() -> None:
    since = "2026-12-01T10:00:00+00:00"
    running = status.pod_state(
        _group(
            "Running",
            container_view={
                "currentState": {"state": "Running", "startTime": since},
                "previousState": {"state": "Terminated", "exitCode": 1, "detailStatus": "Error"},
                "restartCount": 1,
            },
        )
    )
    app = running.containers[0]
    assert app.started_at is not None and app.started_at.isoformat() == since
    assert running.started_at == app.started_at
    assert app.restart_count == 1 and app.last_terminated is not None
    assert (app.last_terminated.exit_code, app.last_terminated.reason) == (1, "Error")
    stopped = status.pod_state(
        _group("Stopped", container_view={"currentState": {"state": "Running"}})
    )  # `az container stop`, or the platform: reported, never started again
    assert (stopped.phase, stopped.reason) == ("Failed", "Stopped")
    assert stopped.containers[0].state == "terminated"
    done = _group(
        "Succeeded",
        container_view={"currentState": {"state": "Terminated", "exitCode": 0}},
    )
    done.restart_policy = "Never"
    finished = status.pod_state(done)
    assert finished.phase == "Succeeded"
    assert (finished.containers[0].state, finished.containers[0].reason) == (
        "terminated",
        "Completed",
    )


def test_a_group_in_a_subnet_without_ports_is_one_aci_accepts() -> None:
    subnet = {"subnet_ids": ["/subscriptions/s/x/subnets/aci"]}
    made = build(
        pod(container(resources={"requests": {"cpu": "1", "memory": "1G"}})), network=subnet
    )
    assert made.group.ip_address.type == "Private"
    limits.check_group(made.group, made.name)  # ACI wants the IP's ports on a container
    ported = container(ports=[{"containerPort": 8080}])
    made = build(pod(ported), network=subnet)
    assert [p.port for p in made.group.ip_address.ports] == [8080]
    assert [p.port for p in made.group.containers[0].ports] == [8080]
