"""The `aci` backend against the ACI emulator, without Kubernetes: the real Azure SDK
and azure-identity over HTTPS, exec and attach over the emulator's WebSockets, and
the emulator misbehaving (throttling, groups gone behind vkpy's back)."""
# ruff: noqa: F811 - pytest fixtures are imported by name and then requested as arguments

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator
from typing import Any

import pytest

from tests.integration.aci_fixtures import AciSetup, aci, aci_emulator  # noqa: F401
from vkpy.providers.aci import AciConfig, AciProvider
from vkpy.providers.aci.naming import group_name
from vkpy.providers.base import (
    ContainerConfig,
    LogQuery,
    PodConfig,
    PodRef,
    PodState,
    StreamIO,
    TerminalSize,
)
from vkpy.providers.errors import (
    AdmissionError,
    NotFoundError,
    RetryableError,
    UnsupportedError,
)


class Sink:
    def __init__(self) -> None:
        self.data = b""

    async def write(self, data: bytes) -> None:
        self.data += data

    async def close(self) -> None:
        pass


class Input:
    def __init__(self, *chunks: bytes) -> None:
        self.chunks = list(chunks)

    async def read(self) -> bytes:
        await asyncio.sleep(0.3)
        return self.chunks.pop(0) if self.chunks else b""


def pod_config(name: str, command: list[str], uid: str = "", **spec: Any) -> PodConfig:
    ref = PodRef("default", name, uid or f"uid-{name}-0001")
    app = ContainerConfig(
        "app",
        "busybox",
        tuple(command),
        (),
        env=(("GREETING", "hi"),),
        spec={"name": "app", "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}}, **spec},
    )
    return PodConfig(
        ref,
        {"metadata": {"name": name, "namespace": "default"}, "spec": {"restartPolicy": "Always"}},
        (),
        (app,),
    )


@pytest.fixture
async def provider(aci: AciSetup) -> AsyncIterator[AciProvider]:
    p = AciProvider(AciConfig.from_dict(aci.config()), "node-a")
    await p.start()
    try:
        yield p
    finally:
        await p.close()


async def until_running(p: AciProvider, ref: PodRef, timeout: float = 20) -> PodState:
    async with asyncio.timeout(timeout):
        while True:
            await p.refresh()
            state = await p.get_pod_status(ref)
            if state.phase == "Running":
                return state
            await asyncio.sleep(0.2)


async def test_exec_a_command_and_a_shell_with_a_terminal(provider: AciProvider) -> None:
    pod = pod_config("shell", ["sh", "-c", "echo up; exec sleep 600"])
    await provider.create_pod(pod)
    await until_running(provider, pod.ref)
    out = Sink()
    code = await provider.exec_in_container(
        pod.ref, "app", ["env"], StreamIO(None, out, None, tty=False)
    )
    assert code == 0 and b"GREETING=hi\n" in out.data
    with pytest.raises(UnsupportedError, match="without arguments"):
        await provider.exec_in_container(
            pod.ref, "app", ["ls", "-l"], StreamIO(None, Sink(), None, False)
        )

    async def sizes() -> AsyncIterator[TerminalSize]:
        yield TerminalSize(width=100, height=40)

    tty = Sink()
    io = StreamIO(
        Input(b"stty size\n", b"echo $GREETING-there\n", b"exit\n"),
        tty,
        None,
        tty=True,
        resize=sizes(),
    )
    assert await provider.exec_in_container(pod.ref, "app", ["sh"], io) == 0
    assert b"40 100" in tty.data and b"hi-there" in tty.data
    with pytest.raises(NotFoundError):
        await provider.exec_in_container(pod.ref, "nope", ["sh"], io)


async def test_attach_streams_output_from_now_on(provider: AciProvider) -> None:
    pod = pod_config(
        "ticker", ["sh", "-c", "i=0; while true; do i=$((i+1)); echo tick $i; sleep 0.2; done"]
    )
    await provider.create_pod(pod)
    await until_running(provider, pod.ref)
    out = Sink()
    task = asyncio.create_task(
        provider.attach_to_container(pod.ref, "app", StreamIO(None, out, None, False))
    )
    async with asyncio.timeout(10):
        while out.data.count(b"tick") < 3:
            await asyncio.sleep(0.1)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert b"tick 1\n" not in out.data.split(b"tick")[0]


async def test_follow_logs_never_repeats_or_loses_lines(provider: AciProvider) -> None:
    pod = pod_config(
        "counter", ["sh", "-c", "for i in 1 2 3 4 5 6 7 8; do echo line $i; sleep 0.3; done"]
    )
    await provider.create_pod(pod)
    await until_running(provider, pod.ref)
    lines: list[bytes] = []

    async def follow() -> None:
        async for record in provider.container_logs(pod.ref, LogQuery("app", follow=True)):
            lines.append(record.data)
            if len(lines) == 8:
                return

    async with asyncio.timeout(20):
        await follow()
    assert lines == [f"line {i}\n".encode() for i in range(1, 9)]
    tail = [r.data async for r in provider.container_logs(pod.ref, LogQuery("app", tail_lines=2))]
    assert tail == [b"line 7\n", b"line 8\n"]


async def test_a_group_too_big_for_the_location_is_an_admission_rejection_with_acis_message(
    provider: AciProvider,
) -> None:
    """As the kubelet rejects a pod it can never fit at admission: Failed, not waiting."""
    big = pod_config("big", ["true"], resources={"requests": {"cpu": "8", "memory": "1Gi"}})
    with pytest.raises(AdmissionError) as refused:
        await provider.create_pod(big)
    assert refused.value.reason == "ResourceRequestsNotSupported"
    assert "maximum allowed resource" in str(refused.value)


async def test_throttled_calls_are_retried_and_every_pod_converges(
    aci: AciSetup, provider: AciProvider
) -> None:
    aci.emulator.faults.throttle = 0.3
    aci.emulator.faults.retry_after = 0.05
    pods = [pod_config(f"p{i}", ["sh", "-c", "exec sleep 600"]) for i in range(6)]
    await asyncio.gather(*(provider.create_pod(p) for p in pods))
    for p in pods:
        await until_running(provider, p.ref, timeout=40)
    assert aci.emulator.store.calls["throttled"] > 0


async def test_restart_adopts_groups_and_a_group_deleted_behind_our_back_is_lost(
    aci: AciSetup, provider: AciProvider
) -> None:
    pods = [pod_config(f"keep{i}", ["sh", "-c", "exec sleep 600"]) for i in range(3)]
    for p in pods:
        await provider.create_pod(p)
    again = AciProvider(AciConfig.from_dict(aci.config()), "node-a")
    other = AciProvider(AciConfig.from_dict(aci.config()), "node-b")
    await again.start()
    await other.start()
    try:
        assert sorted(await again.list_pods()) == sorted(p.ref for p in pods)
        assert await other.list_pods() == []
        await until_running(again, pods[0].ref)
        aci.emulator.delete_behind(group_name(pods[0].ref), aci.resource_group)
        await again.refresh()
        with pytest.raises(NotFoundError):
            await again.get_pod_status(pods[0].ref)
    finally:
        await again.close()
        await other.close()


async def test_managed_and_workload_identities_sign_in(
    aci: AciSetup, monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    emulator = aci.emulator
    for name, value in emulator.environment().items():  # App Service's managed identity
        monkeypatch.setenv(name, value)
    token = tmp_path / "token"
    token.write_text(emulator.directory.federated_assertion)
    issued = emulator.directory.issued
    for credentials in (
        {"type": "managed_identity"},
        {
            "type": "workload_identity",
            "tenant_id": emulator.directory.tenant,
            "client_id": emulator.directory.client_id,
            "token_file": str(token),
            "authority": emulator.url,
        },
    ):
        p = AciProvider(AciConfig.from_dict(aci.config(credentials=credentials)), "node-id")
        await p.start()
        try:
            assert await p.list_pods() == []
        finally:
            await p.close()
    assert emulator.directory.issued == issued + 2


async def test_a_wrong_secret_is_a_retryable_sign_in_error(aci: AciSetup) -> None:
    config = aci.config()
    config["credentials"] = {**config["credentials"], "client_secret": "wrong"}
    p = AciProvider(AciConfig.from_dict(config), "node-x")
    await p.start()
    try:
        with pytest.raises(RetryableError, match="cannot sign in"):
            await p.list_pods()
    finally:
        await p.close()


LIST = (
    "GET /subscriptions/{sub}/resourceGroups/{rg}/providers/Microsoft.ContainerInstance"
    "/containerGroups"
)
GET = LIST + "/{name}"


async def test_429_and_503_are_retried_no_sooner_than_retry_after(
    aci: AciSetup, provider: AciProvider
) -> None:
    await provider.list_pods()  # signed in
    faults, store = aci.emulator.faults, aci.emulator.store
    faults.retry_after = 1.0
    faults.fail_next = [429, 503]
    start = len(store.answered)
    assert await provider.list_pods() == []
    lists = [(t, code) for t, route, code in store.answered[start:] if route == LIST]
    assert [code for _, code in lists] == [429, 503, 200]
    gaps = [b - a for (a, _), (b, _) in itertools.pairwise(lists)]
    assert min(gaps) >= 1.0, gaps  # the SDK waited as Retry-After asked, each time

    faults.retry_after = 0.1
    faults.fail_next = [503] * 11  # more than retry_attempts (10): the SDK gives up
    with pytest.raises(RetryableError) as failed:
        await provider.list_pods()
    assert failed.value.reason == "ServiceUnavailable"
    assert failed.value.retry_after == pytest.approx(0.1)  # ARM's hint, for the back-off
    assert "Please retry later" in str(failed.value)


async def test_the_monitor_lists_once_per_round_and_reads_a_steady_group_each_refresh_interval(
    aci: AciSetup,
) -> None:
    now = [1000.0]
    config = AciConfig.from_dict(aci.config(refresh_interval=30))
    p = AciProvider(config, "node-a", clock=lambda: now[0])
    await p.start()
    try:
        pods = [pod_config(f"steady{i}", ["sh", "-c", "exec sleep 600"]) for i in range(4)]
        for pod in pods:
            await p.create_pod(pod)
        for pod in pods:
            await until_running(p, pod.ref)
        await p.refresh()  # every group read once since it runs
        calls = aci.emulator.store.calls

        before = calls.copy()
        for _ in range(5):
            await p.refresh()
        spent = calls - before
        assert (spent[LIST], spent[GET], sum(spent.values())) == (5, 0, 5)  # one list per round
        now[0] += 30  # refresh_interval later: each group's instance view read once
        before = calls.copy()
        await p.refresh()
        await p.refresh()
        spent = calls - before
        assert (spent[LIST], spent[GET], sum(spent.values())) == (2, 4, 6)
        for pod in pods:
            assert (await p.get_pod_status(pod.ref)).phase == "Running"  # from memory
        assert calls - before == spent
    finally:
        await p.close()


async def test_the_default_chain_signs_in_from_the_environment(
    aci: AciSetup, monkeypatch: pytest.MonkeyPatch
) -> None:
    directory = aci.emulator.directory
    for name, value in {
        "AZURE_TENANT_ID": directory.tenant,
        "AZURE_CLIENT_ID": directory.client_id,
        "AZURE_CLIENT_SECRET": directory.client_secret,
        "AZURE_AUTHORITY_HOST": aci.emulator.url,
    }.items():
        monkeypatch.setenv(name, value)
    issued = directory.issued
    p = AciProvider(AciConfig.from_dict(aci.config(credentials={"type": "default"})), "node-d")
    await p.start()
    try:
        assert type(p.clients.credential).__name__ == "DefaultAzureCredential"
        assert await p.list_pods() == []
    finally:
        await p.close()
    assert directory.issued == issued + 1


async def test_a_pod_on_a_vnet_node_runs_with_the_groups_private_ip(aci: AciSetup) -> None:
    subnet = (
        "/subscriptions/s/resourceGroups/net/providers/Microsoft.Network"
        "/virtualNetworks/v/subnets/aci"
    )
    config = AciConfig.from_dict(aci.config(network={"subnet_ids": [subnet]}))
    p = AciProvider(config, "node-v")
    await p.start()
    try:
        pod = pod_config("private", ["sh", "-c", "exec sleep 600"])  # no ports
        await p.create_pod(pod)
        state = await until_running(p, pod.ref)
        group = aci.emulator.group(group_name(pod.ref), aci.resource_group)
        assert group is not None and group.model.ip_address.type == "Private"
        assert [s.id for s in group.model.subnet_ids] == [subnet]
        assert state.pod_ip == group.ip and state.pod_ip
    finally:
        await p.close()
