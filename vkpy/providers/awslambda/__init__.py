"""The `lambda` backend: every pod is one AWS Lambda function.

See docs/aws-backends.md for the mapping, the `vkpy.io/lambda-*` annotations and
the `invoke` exec command.
"""

from vkpy.providers.awslambda.config import LambdaConfig
from vkpy.providers.awslambda.provider import LambdaProvider

__all__ = ["LambdaConfig", "LambdaProvider"]
