"""The `aci` backend (alias `azure`): pods as Azure Container Instances container groups."""

from vkpy.providers.aci.config import AciConfig
from vkpy.providers.aci.provider import AciProvider

__all__ = ["AciConfig", "AciProvider"]
