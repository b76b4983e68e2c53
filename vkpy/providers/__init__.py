"""Backends that run pods: the contract in `base`, typed errors in `errors`, one
subpackage per backend, and `registry` to pick one by name.

Modules:
- aci/: The `aci` backend (alias `azure`): pods as Azure Container Instances container
  groups.
- aws/: Plumbing shared by the AWS backends (`lambda`, `fargate`).
- awslambda/: The `lambda` backend: every pod is one AWS Lambda function.
- base: The contract between the kubelet logic and a backend that runs pods.
- config_reader: A strict reader for a backend's `--provider-config` mapping, shared by
  backends.
- errors: Typed errors a backend raises, so the kubelet logic decides by type, never by
  text.
- fargate/: The `fargate` backend: every pod is one ECS task with launch type FARGATE.
- owner_tags: The tags that tie a cloud resource to the node and pod that made it.
- process/: The `process` backend: each container of a pod runs as a process on this
  host.
- registry: Choosing a backend by name (`--provider`) and building it from its config
  file.
- sim/: The `sim` backend: a simulated serverless platform for tests, demos and
  benchmarks.
"""
