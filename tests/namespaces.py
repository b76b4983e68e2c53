"""A fresh namespace that pods can be created in, for tests of every layer.

The API server rejects pods in a namespace until the controller-manager's
serviceaccount controller has created its `default` ServiceAccount. That usually
takes milliseconds, but right after an API server outage (the fault tests kill it)
the controller-manager's informers wait out client-go's reflector back-off, which
grows to 30 s, before they list again. Waiting for the ServiceAccount is therefore
part of making a namespace, with room for that back-off; it was written five times
with a 30 s bound, which a run after the fault tests exceeded.
"""

from __future__ import annotations

import time

from vkpy.devcluster import RunKubectl

#: client-go's reflector back-off caps at 30 s; allow it twice, plus the re-list.
SERVICE_ACCOUNT_BOUND = 90.0


def wait_for_default_service_account(
    run_kubectl: RunKubectl, namespace: str, bound: float = SERVICE_ACCOUNT_BOUND
) -> None:
    """Return once `namespace` has its default ServiceAccount; TimeoutError after `bound` s."""
    deadline = time.monotonic() + bound
    while True:
        got = run_kubectl("get", "serviceaccount", "default", "-n", namespace, check=False)
        if got.returncode == 0:
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"no default ServiceAccount in {namespace}: {got.stderr}")
        time.sleep(0.1)


def create_namespace(run_kubectl: RunKubectl, name: str) -> str:
    """Create `name` and wait until pods can be created in it; returns the name."""
    run_kubectl("create", "namespace", name)
    wait_for_default_service_account(run_kubectl, name)
    return name
