"""The `lambda` backend: every pod is one AWS Lambda function.

See docs/aws-backends.md for the mapping, the `vkpy.io/lambda-*` annotations and
the `invoke` exec command.

Modules:
- config: Settings of the `lambda` backend (its `--provider-config`).
- function_spec: What Lambda function a pod is: the pure mapping from `PodConfig` to API
  parameters.
- invoke: `kubectl exec <pod> -- invoke '<json>'`: what exec means for a Lambda
  function.
- provider: The `lambda` backend: pods as Lambda functions, through aiobotocore.
- status: What a function's state means for its pod: the pure mapping to `PodState`.
"""

from vkpy.providers.awslambda.config import LambdaConfig
from vkpy.providers.awslambda.provider import LambdaProvider

__all__ = ["LambdaConfig", "LambdaProvider"]
