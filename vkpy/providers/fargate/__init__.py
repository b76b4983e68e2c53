"""The `fargate` backend: every pod is one ECS task with launch type FARGATE.

See docs/aws-backends.md for the mapping and the provider settings.

Modules:
- config: Settings of the `fargate` backend (its `--provider-config`).
- ecs: The ECS and CloudWatch Logs calls the fargate backend makes, typed and batched.
- exec: `kubectl exec` on a Fargate task through ECS Exec.
- exec_command: What `kubectl exec` becomes under ECS Exec, and what comes back: a small
  shell wrapper.
- provider: The `fargate` backend: pods as ECS tasks on Fargate, through aiobotocore.
- records: What the fargate backend remembers of each pod, and when a stopped task runs
  again.
- sizes: Fargate's task sizes: the CPU and memory pairs a task may have, and picking
  one.
- ssm_session: The Session Manager data channel on aiohttp's WebSocket client: the
  asyncio side of `vkpy.streams.ssm_channel`, used by ECS Exec.
- status: What an ECS task's state means for its pod: the pure mapping to `PodState`.
- task_definition: What ECS task definition a pod is: the pure mapping from `PodConfig`
  to API parameters.
"""

from vkpy.providers.fargate.config import FargateConfig
from vkpy.providers.fargate.provider import FargateProvider

__all__ = ["FargateConfig", "FargateProvider"]
