"""The ACI emulator refuses what ACI refuses: each documented rule, checked on a group
otherwise valid, in ARM's error shape built with the SDK's model."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from azure.mgmt.containerinstance import models as m

from tests.aci_emulator.limits import ArmError, check_group, missing_required


def group(**changes: Any) -> m.ContainerGroup:
    app = m.Container(
        name="app",
        image="busybox",
        ports=[m.ContainerPort(port=80)],
        resources=m.ResourceRequirements(requests=m.ResourceRequests(cpu=1.0, memory_in_gb=1.5)),
    )
    made = m.ContainerGroup(
        location="westeurope",
        os_type="Linux",
        containers=[app],
        ip_address=m.IpAddress(type="Public", ports=[m.Port(port=80)]),
    )
    for key, value in changes.items():
        setattr(made, key, value)
    return made


def gpu(count: int, sku: str) -> Callable[[m.ContainerGroup], None]:
    def change(g: m.ContainerGroup) -> None:
        g.containers[0].resources.requests.gpu = m.GpuResource(count=count, sku=sku)

    return change


def requests(cpu: float, memory: float) -> Callable[[m.ContainerGroup], None]:
    def change(g: m.ContainerGroup) -> None:
        g.containers[0].resources.requests = m.ResourceRequests(cpu=cpu, memory_in_gb=memory)

    return change


def port(number: int) -> Callable[[m.ContainerGroup], None]:
    def change(g: m.ContainerGroup) -> None:
        g.containers[0].ports = [m.ContainerPort(port=number)]
        g.ip_address = None

    return change


def windows_with_init(g: m.ContainerGroup) -> None:
    g.os_type = "Windows"
    g.init_containers = [m.InitContainerDefinition(name="setup", image="busybox")]


def confidential_windows(g: m.ContainerGroup) -> None:
    g.os_type = "Windows"
    g.sku = "Confidential"


def test_a_valid_group_passes() -> None:
    made = group()
    assert missing_required(made) == []
    check_group(made, "team-a-web-6f1c2d3e")


@pytest.mark.parametrize(
    ("name", "change", "code"),
    [
        ("Bad_Name", None, "InvalidContainerGroupName"),
        ("a--b", None, "InvalidContainerGroupName"),
        ("ok", requests(4.5, 1.0), "ResourceRequestsNotSupported"),
        ("ok", requests(1.0, 16.5), "ResourceRequestsNotSupported"),
        ("ok", requests(0.333, 1.0), "InvalidContainerResourceRequests"),
        ("ok", requests(1.0, 1.05), "InvalidContainerResourceRequests"),
        ("ok", gpu(3, "K80"), "InvalidGpuCount"),
        ("ok", gpu(1, "A100"), "InvalidGpuSku"),
        ("ok", port(70000), "InvalidContainerPort"),
        (
            "ok",
            lambda g: setattr(g.ip_address, "ports", [m.Port(port=81)]),
            "InvalidIpAddressPorts",
        ),
        ("ok", windows_with_init, "InitContainersNotSupported"),
        ("ok", lambda g: setattr(g, "priority", "Spot"), "SpotPriorityNotSupported"),
        (
            "ok",
            confidential_windows,
            "ConfidentialSkuNotSupported",
        ),
        (
            "ok",
            lambda g: setattr(g.containers[0], "name", "App"),
            "InvalidContainerName",
        ),
    ],
)
def test_what_aci_refuses_is_refused(
    name: str, change: Callable[[m.ContainerGroup], Any] | None, code: str
) -> None:
    made = group()
    if change is not None:
        change(made)
    with pytest.raises(ArmError) as refused:
        check_group(made, name)
    assert (refused.value.status, refused.value.code) == (400, code)
    body = refused.value.body()
    assert body["error"]["code"] == code and body["error"]["message"]


def test_a_missing_required_property_is_named() -> None:
    body = group().serialize()
    del body["properties"]["containers"][0]["properties"]["image"]
    parsed = m.ContainerGroup.deserialize(body)  # the SDK's model accepts it; ACI does not
    assert missing_required(parsed) == ["properties.containers[0].properties.image"]
