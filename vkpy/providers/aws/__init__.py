"""Plumbing shared by the AWS backends (`lambda`, `fargate`).

One aiobotocore session and long-lived clients (`clients`), retries of throttling
and transient failures with backoff and jitter (`retry`), the settings every AWS
backend has (`settings`), the tags that say which node and pod own a resource
(`tags`), names derived from pods within AWS's limits (`naming`), and reading
CloudWatch Logs as container logs (`cloudwatch_logs`). Both backends import from
here; they never import each other.
"""
