"""The `fargate` backend: every pod is one ECS task with launch type FARGATE.

See docs/aws-backends.md for the mapping and the provider settings.
"""

from vkpy.providers.fargate.config import FargateConfig
from vkpy.providers.fargate.provider import FargateProvider

__all__ = ["FargateConfig", "FargateProvider"]
