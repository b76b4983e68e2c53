"""An Azure Container Instances emulator of our own, for vkpy's `aci` backend.

Azure cannot be reached from here and no ACI emulator exists on the registries this
project can use, so the tests and the bench run the backend, through the real Azure
SDK and azure-identity, against this one: an HTTPS server on 127.0.0.1 that speaks
the ARM REST API of container groups (with long-running operations), the logs, exec
and attach routes, Azure Monitor's metrics, and the token endpoints azure-identity
calls. It is strict where the service is (api-version, required fields, names,
resource limits, SKUs) and answers in ARM's error shape; container "images" run as
local processes so logs, exec and attach show real output. See `AciEmulator`.
"""

from tests.aci_emulator.server import AciEmulator, Faults

__all__ = ["AciEmulator", "Faults"]
