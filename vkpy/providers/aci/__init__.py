"""The `aci` backend (alias `azure`): pods as Azure Container Instances container groups.

Modules:
- clients: The Azure SDK clients of one node, and ARM's errors as the provider
  contract's.
- config: Settings of the `aci` backend (its `--provider-config`), read strictly.
- group_spec: A pod as one ACI container group: the mapping, in one place.
- logs: `kubectl logs` for ACI containers: tail, since, timestamps and follow.
- metrics: `/stats/summary` and `/metrics/resource` (so `kubectl top`) from Azure
  Monitor.
- naming: Container group names and the tags that say which node and pod own a group.
- provider: The `aci` backend: pods as Azure Container Instances container groups.
- records: What the `aci` backend remembers of each pod's container group.
- resources: A container's CPU, memory and GPU as ACI takes them.
- status: A container group's provisioning state and instance view as the pod's state.
- terminal: `kubectl exec` and `kubectl attach` through ACI's WebSocket terminals.
- volumes: A pod's volumes as ACI volumes.
"""

from vkpy.providers.aci.config import AciConfig
from vkpy.providers.aci.provider import AciProvider

__all__ = ["AciConfig", "AciProvider"]
