"""pytest fixtures for the ACI backend's tests: the emulator, and a node config for it.

The emulator runs once per session (in a thread of the test process); each test
gets its own resource group, so groups of other tests never show up in its lists,
and its faults are reset afterwards.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from tests.aci_emulator import AciEmulator

_SHARED: list[AciEmulator] = []


@pytest.fixture(scope="session")
def aci_emulator() -> Iterator[AciEmulator]:
    if not _SHARED:
        _SHARED.append(AciEmulator().start())
    emulator = _SHARED[0]
    try:
        yield emulator
    finally:
        emulator.stop()
        _SHARED.clear()


@dataclass
class AciSetup:
    emulator: AciEmulator
    resource_group: str

    def config(self, **overrides: Any) -> dict[str, Any]:
        e = self.emulator
        return {
            "subscription_id": e.store.subscription,
            "resource_group": self.resource_group,
            "region": "westeurope",
            "arm_endpoint": e.url,
            "ca_bundle": str(e.ca_path),
            "credentials": {
                "type": "client_secret",
                "tenant_id": e.directory.tenant,
                "client_id": e.directory.client_id,
                "client_secret": e.directory.client_secret,
                "authority": e.url,
            },
            "poll_interval": 0.5,
            "refresh_interval": 5,
            "log_poll_interval": 0.3,
            "retry_attempts": 10,
            "retry_backoff": 0.1,
            **overrides,
        }


@pytest.fixture
def aci(aci_emulator: AciEmulator) -> Iterator[AciSetup]:
    group = f"vkpy-test-{secrets.token_hex(3)}"
    aci_emulator.store.resource_groups.add(group)
    try:
        yield AciSetup(aci_emulator, group)
    finally:
        aci_emulator.faults.throttle = 0.0
        aci_emulator.faults.server_error = 0.0
        aci_emulator.faults.max_groups = None
        aci_emulator.faults.deployment_failures.clear()
        aci_emulator.faults.fail_next.clear()
        aci_emulator.faults.retry_after = 1.0
        # The emulator outlives the test: end the groups it left (their processes would
        # otherwise run, some of them burning CPU, until the session ends).
        for rg, name in [key for key in aci_emulator.store.groups if key[0] == group]:
            aci_emulator.delete_behind(name, rg)
