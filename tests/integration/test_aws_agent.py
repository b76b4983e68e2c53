"""Pods on a virtual node backed by AWS Lambda and Fargate, emulated by moto, through
the real control plane: `python -m vkpy --provider lambda|fargate` as a process, pods
created and read with the pinned kubectl, `kubectl logs` and `kubectl exec` through
the API server. vkpy reaches moto only through the test's proxy (which throttles on
cue and reports what moto cannot: a function still being created, a task still
provisioning, a non-zero exit code).
"""
# ruff: noqa: F811 - pytest fixtures are imported by name and then requested as arguments

from __future__ import annotations

import json
import subprocess
import time
from typing import Any

from tests.integration.agent import Agent, Kube, sim_pod, wait_for
from tests.integration.aws_fixtures import (  # noqa: F401 - fixtures
    FargateSetup,
    LambdaSetup,
    aws,
    aws_proxy,
    fargate_setup,
    lambda_setup,
    moto,
)
from tests.integration.cannot_start import cannot_start
from tests.integration.conftest import StartAgent
from tests.integration.moto_server import Aws, AwsProxy, Call, MotoServer, exit_code_rewrite
from vkpy.providers.aws.naming import function_name, task_family
from vkpy.providers.base import PodRef

IMAGE = "123456789012.dkr.ecr.us-east-1.amazonaws.com/hello:1"


def aws_pod(name: str, node: str, **kwargs: Any) -> dict[str, Any]:
    manifest = sim_pod(name, node, **kwargs)
    manifest["spec"]["automountServiceAccountToken"] = False
    return manifest


def ref_of(pod: dict[str, Any]) -> PodRef:
    m = pod["metadata"]
    return PodRef(m["namespace"], m["name"], m["uid"])


def phase_is(kube: Kube, name: str, phase: str) -> Any:
    return lambda: (p := kube.get("pod", name)) and p["status"].get("phase") == phase and p


def container(pod: dict[str, Any]) -> dict[str, Any]:
    statuses: list[dict[str, Any]] = pod["status"].get("containerStatuses") or [{}]
    return statuses[0]


def pending_for(seconds: float, matches: Any, edit: Any) -> Any:
    """A proxy rewrite that makes each resource look unfinished for `seconds` after
    vkpy first asks about it (moto makes functions Active and tasks RUNNING at once)."""
    first_seen: dict[str, float] = {}

    def rewrite(call: Call, document: dict[str, Any]) -> dict[str, Any] | None:
        key = matches(call, document)
        if key is None:
            return None
        now = time.monotonic()
        if now - first_seen.setdefault(key, now) < seconds:
            edit(document)
            return document
        return None

    return rewrite


def function_pending(call: Call, document: dict[str, Any]) -> str | None:
    if call.method == "GET" and call.path.startswith("/2015-03-31/functions/"):
        return str((document.get("Configuration") or {}).get("FunctionName") or "") or None
    return None


def make_function_pending(document: dict[str, Any]) -> None:
    document["Configuration"].update(
        State="Pending", StateReasonCode="Creating", StateReason="The function is being created."
    )


def tasks_described(call: Call, document: dict[str, Any]) -> str | None:
    if call.operation.endswith(".DescribeTasks") and len(document.get("tasks") or []) == 1:
        return str(document["tasks"][0].get("taskArn"))
    return None


def make_task_provisioning(document: dict[str, Any]) -> None:
    if document["tasks"][0].get("lastStatus") == "RUNNING":
        document["tasks"][0]["lastStatus"] = "PROVISIONING"


def pending_then_running(kube: Kube, name: str, while_: str) -> dict[str, Any]:
    """Wait for the pod to show ContainerCreating while Pending, then to run."""
    pending = wait_for(
        f"ContainerCreating while {while_}",
        lambda: (
            (p := kube.get("pod", name))
            and (container(p).get("state") or {}).get("waiting", {}).get("reason")
            == "ContainerCreating"
            and p
        ),
    )
    assert pending["status"]["phase"] == "Pending"
    running: dict[str, Any] = wait_for("Running", phase_is(kube, name, "Running"), timeout=60)
    return running


def events(kube: Kube, name: str) -> dict[str, str]:
    return {e["reason"]: e["message"] for e in kube.events(name)}


# --- lambda ------------------------------------------------------------------------------


def start_lambda(start_agent: StartAgent, setup: LambdaSetup) -> Agent:
    return start_agent(provider="lambda", config=setup.config())


def test_lambda_pod_pending_then_running_logs_exec_and_delete(
    kube: Kube,
    start_agent: StartAgent,
    lambda_setup: LambdaSetup,
    aws_proxy: AwsProxy,
    aws: Aws,
    moto: MotoServer,
) -> None:
    aws_proxy.rewrites.append(pending_for(4, function_pending, make_function_pending))
    agent = start_lambda(start_agent, lambda_setup)
    manifest = aws_pod("fn", agent.node_name)
    manifest["metadata"]["labels"] = {"app": "hello"}
    manifest["metadata"]["annotations"] = {"vkpy.io/lambda-timeout": "20"}
    manifest["spec"]["containers"] = [
        {
            "name": "handler",
            "image": IMAGE,
            "env": [{"name": "MODE", "value": "test"}],
            "resources": {"limits": {"memory": "32Mi"}},
        }
    ]
    created = kube.create(manifest)
    running = pending_then_running(kube, "fn", "Lambda creates the function")
    assert container(running)["ready"] is True
    assert "128 MB" in running["status"]["message"]  # the memory limit was raised
    wait_for(
        "a Warning Event saying so",
        lambda: any(
            e["type"] == "Warning" and e["reason"] == "BackendAdjusted" and "128 MB" in e["message"]
            for e in kube.events("fn")
        ),
    )
    name = function_name(ref_of(created))
    fn = aws("lambda", "get_function", FunctionName=name)
    assert fn["Configuration"]["MemorySize"] == 128
    assert fn["Configuration"]["Timeout"] == 20
    assert fn["Configuration"]["Environment"]["Variables"] == {"MODE": "test"}
    assert fn["Configuration"]["Role"] == lambda_setup.role_arn
    assert fn["Code"]["ImageUri"] == IMAGE
    assert fn["Tags"]["app"] == "hello"
    assert fn["Tags"]["vkpy.io/node"] == agent.node_name

    aws.put_logs(f"/aws/lambda/{name}", "2030/01/01/[$LATEST]x", "START", "hello from lambda")
    assert kube.kubectl("logs", "-n", kube.namespace, "fn") == "START\nhello from lambda\n"
    assert kube.kubectl("logs", "-n", kube.namespace, "fn", "--tail=1") == "hello from lambda\n"

    moto.queue_lambda_results('{"statusCode": 200, "body": "hi"}')
    out = kube.kubectl("exec", "-n", kube.namespace, "fn", "--", "invoke", '{"x":1}')
    assert json.loads(out) == {"statusCode": 200, "body": "hi"}
    refused = kube.cluster.run_kubectl(
        "exec", "-n", kube.namespace, "fn", "--", "ls", "/", check=False
    )
    assert refused.returncode != 0
    assert "invoke" in refused.stderr

    kube.kubectl("delete", "pod", "fn", "-n", kube.namespace, "--timeout=60s")
    functions = aws("lambda", "list_functions")["Functions"]
    assert name not in {f["FunctionName"] for f in functions}


def test_lambda_restart_adopts_functions_and_removes_orphans(
    kube: Kube, start_agent: StartAgent, lambda_setup: LambdaSetup, aws_proxy: AwsProxy, aws: Aws
) -> None:
    agent = start_lambda(start_agent, lambda_setup)
    kept = kube.create(aws_pod("kept", agent.node_name))
    gone = kube.create(aws_pod("gone", agent.node_name))
    for name in ("kept", "gone"):
        wait_for(f"{name} Running", phase_is(kube, name, "Running"))
    agent.kill()
    kube.kubectl("delete", "pod", "gone", "-n", kube.namespace, "--force", "--grace-period=0")
    creates_before = aws_proxy.counts["POST /2015-03-31/functions"]
    agent.start()
    names = lambda: {f["FunctionName"] for f in aws("lambda", "list_functions")["Functions"]}  # noqa: E731
    wait_for("orphan function removed", lambda: function_name(ref_of(gone)) not in names())
    assert function_name(ref_of(kept)) in names()
    assert kube.phase("kept") == "Running"
    assert aws_proxy.counts["POST /2015-03-31/functions"] == creates_before  # adopted as is
    assert "adopted backend pods" in agent.logs()


def test_lambda_unrepresentable_pod_gets_reason_and_event(
    kube: Kube, start_agent: StartAgent, lambda_setup: LambdaSetup
) -> None:
    agent = start_lambda(start_agent, lambda_setup)
    two = [{"name": "a", "image": IMAGE}, {"name": "b", "image": IMAGE}]
    kube.create(aws_pod("two", agent.node_name, containers=two))
    refused = cannot_start(kube, "two")  # Pending, never Failed (issue 31)
    assert refused["reason"] == "CreateContainerError"
    assert refused["message"].startswith("UnsupportedMultipleContainers: ")
    assert "one container" in refused["message"]
    assert any("UnsupportedMultipleContainers" in e["message"] for e in refused["events"])


def test_lambda_zip_code_from_a_config_map(
    kube: Kube, start_agent: StartAgent, lambda_setup: LambdaSetup, aws: Aws
) -> None:
    agent = start_lambda(start_agent, lambda_setup)
    kube.apply(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "code"},
            "data": {"app.py": "def handler(event, context):\n    return event\n"},
        }
    )
    manifest = aws_pod(
        "zipped",
        agent.node_name,
        annotations={
            "vkpy.io/lambda-runtime": "python3.12",
            "vkpy.io/lambda-handler": "app.handler",
            "vkpy.io/lambda-code-configmap": "code",
        },
        volumes=[{"name": "code", "configMap": {"name": "code"}}],
    )
    zipped = kube.create(manifest)
    wait_for("zipped Running", phase_is(kube, "zipped", "Running"))
    fn = aws("lambda", "get_function", FunctionName=function_name(ref_of(zipped)))
    assert fn["Configuration"]["PackageType"] == "Zip"
    assert (fn["Configuration"]["Runtime"], fn["Configuration"]["Handler"]) == (
        "python3.12",
        "app.handler",
    )
    assert fn["Configuration"]["CodeSize"] > 0


def test_lambda_failed_function_fails_the_pod_with_lambdas_reason(
    kube: Kube, start_agent: StartAgent, lambda_setup: LambdaSetup, aws_proxy: AwsProxy
) -> None:
    def failed_state(call: Call, document: dict[str, Any]) -> dict[str, Any] | None:
        configuration = document.get("Configuration") or {}
        if call.method == "GET" and "-broken-" in str(configuration.get("FunctionName")):
            configuration.update(
                State="Failed",
                StateReasonCode="InvalidImage",
                StateReason="The image manifest or layer media type is not supported.",
            )
            return document
        return None

    aws_proxy.rewrites.append(failed_state)
    agent = start_lambda(start_agent, lambda_setup)
    kube.create(aws_pod("broken", agent.node_name))
    failed = wait_for("broken Failed", phase_is(kube, "broken", "Failed"))
    assert failed["status"]["reason"] == "InvalidImage"
    assert "media type" in failed["status"]["message"]
    assert container(failed)["state"]["terminated"]["reason"] == "InvalidImage"


def test_lambda_pods_converge_under_throttling(
    kube: Kube, start_agent: StartAgent, lambda_setup: LambdaSetup, aws_proxy: AwsProxy, aws: Aws
) -> None:
    aws_proxy.throttle_rate = 0.35
    agent = start_agent(provider="lambda", config=lambda_setup.config(retry_attempts=3))
    pods = [kube.create(aws_pod(f"t{i}", agent.node_name)) for i in range(4)]
    for i in range(4):
        wait_for(f"t{i} Running", phase_is(kube, f"t{i}", "Running"), timeout=90)
    for i in range(4):
        kube.kubectl("delete", "pod", f"t{i}", "-n", kube.namespace, "--wait=false")
    names = {function_name(ref_of(p)) for p in pods}
    wait_for(
        "functions deleted",
        lambda: (
            not names & {f["FunctionName"] for f in aws("lambda", "list_functions")["Functions"]}
        ),
        timeout=90,
    )
    assert sum(aws_proxy.throttled.values()) >= 5
    print(f"throttled calls: {dict(aws_proxy.throttled)} of {dict(aws_proxy.counts)}")


# --- fargate -----------------------------------------------------------------------------


def start_fargate(start_agent: StartAgent, setup: FargateSetup, **overrides: Any) -> Agent:
    return start_agent(provider="fargate", config=setup.config(**overrides))


def restarted_once(kube: Kube, name: str, timeout: float) -> dict[str, Any]:
    """The pod once it shows one restart and its container running again."""
    found: dict[str, Any] = wait_for(
        f"{name} restarted once and running",
        lambda: (
            (p := kube.get("pod", name))
            and container(p).get("restartCount") == 1
            and "running" in container(p).get("state", {})
            and p
        ),
        timeout=timeout,
    )
    return found


def task_of(aws: Aws, setup: FargateSetup, pod: dict[str, Any]) -> dict[str, Any] | None:
    arns = aws("ecs", "list_tasks", cluster=setup.cluster)["taskArns"]
    stopped = aws("ecs", "list_tasks", cluster=setup.cluster, desiredStatus="STOPPED")
    arns += stopped["taskArns"]
    if not arns:
        return None
    found = aws("ecs", "describe_tasks", cluster=setup.cluster, tasks=arns, include=["TAGS"])
    uid = pod["metadata"]["uid"]
    mine = [
        t for t in found["tasks"] if {"key": "vkpy.io/pod-uid", "value": uid} in t.get("tags", [])
    ]
    live = [t for t in mine if t.get("desiredStatus") != "STOPPED"]
    return dict((live or mine)[0]) if mine else None


def test_fargate_pod_pending_then_running_logs_and_delete(
    kube: Kube,
    start_agent: StartAgent,
    fargate_setup: FargateSetup,
    aws_proxy: AwsProxy,
    aws: Aws,
) -> None:
    aws_proxy.rewrites.append(pending_for(3, tasks_described, make_task_provisioning))
    agent = start_fargate(start_agent, fargate_setup)
    manifest = aws_pod("task", agent.node_name, terminationGracePeriodSeconds=5)
    manifest["spec"]["containers"] = [
        {
            "name": "app",
            "image": "public.ecr.aws/docker/library/busybox:1.36",
            "command": ["sh", "-c"],
            "args": ["echo started; sleep 3600"],
            "env": [{"name": "MODE", "value": "test"}],
            "resources": {"requests": {"cpu": "250m", "memory": "700Mi"}},
        }
    ]
    created = kube.create(manifest)
    running = pending_then_running(kube, "task", "the task provisions")
    task = task_of(aws, fargate_setup, created)
    assert task is not None and task["launchType"] == "FARGATE"
    eni = {d["name"]: d["value"] for d in task["attachments"][0]["details"]}
    assert running["status"]["podIP"] == eni["privateIPv4Address"]
    assert "rounded up" in running["status"]["message"]
    wait_for(
        "a Warning Event saying so",
        lambda: any(
            e["reason"] == "BackendAdjusted" and "rounded up" in e["message"]
            for e in kube.events(created["metadata"]["name"])
        ),
    )
    family = task_family(ref_of(created))
    definition = aws("ecs", "describe_task_definition", taskDefinition=family)["taskDefinition"]
    assert (definition["cpu"], definition["memory"]) == ("256", "1024")
    app = definition["containerDefinitions"][0]
    assert (app["entryPoint"], app["command"]) == (["sh", "-c"], ["echo started; sleep 3600"])
    assert app["environment"] == [{"name": "MODE", "value": "test"}]
    assert app["essential"] is True
    assert app["stopTimeout"] == 5
    options = app["logConfiguration"]["options"]
    assert options["awslogs-group"] == fargate_setup.log_group
    assert options["awslogs-stream-prefix"] == family

    stream = f"{family}/app/{task['taskArn'].rsplit('/', 1)[-1]}"
    aws.put_logs(fargate_setup.log_group, stream, "started", "working")
    assert kube.kubectl("logs", "-n", kube.namespace, "task") == "started\nworking\n"

    kube.kubectl("delete", "pod", "task", "-n", kube.namespace, "--timeout=60s")
    after = task_of(aws, fargate_setup, created)
    assert after is not None and after["lastStatus"] == "STOPPED"
    gone = aws("ecs", "describe_task_definition", taskDefinition=definition["taskDefinitionArn"])
    assert gone["taskDefinition"]["status"] == "INACTIVE"


def test_fargate_exit_codes_make_succeeded_and_failed(
    kube: Kube,
    start_agent: StartAgent,
    fargate_setup: FargateSetup,
    aws_proxy: AwsProxy,
    aws: Aws,
) -> None:
    agent = start_fargate(start_agent, fargate_setup)
    ok = kube.create(aws_pod("ok", agent.node_name))
    bad = kube.create(aws_pod("bad", agent.node_name))
    for name in ("ok", "bad"):
        wait_for(f"{name} Running", phase_is(kube, name, "Running"))
    tasks = {name: task_of(aws, fargate_setup, pod) for name, pod in (("ok", ok), ("bad", bad))}
    aws_proxy.rewrites.append(exit_code_rewrite(tasks["bad"]["taskArn"], 3))  # type: ignore[index]
    for task in tasks.values():
        assert task is not None
        aws(
            "ecs",
            "stop_task",
            cluster=fargate_setup.cluster,
            task=task["taskArn"],
            reason="Essential container in task exited",
        )
    succeeded = wait_for("Succeeded", phase_is(kube, "ok", "Succeeded"))
    assert container(succeeded)["state"]["terminated"]["exitCode"] == 0
    failed = wait_for("Failed", phase_is(kube, "bad", "Failed"))
    terminated = container(failed)["state"]["terminated"]
    assert (terminated["exitCode"], terminated["reason"]) == (3, "Error")
    assert failed["status"]["message"] == "Essential container in task exited"


def test_fargate_restart_policy_reruns_a_stopped_task(
    kube: Kube, start_agent: StartAgent, fargate_setup: FargateSetup, aws: Aws
) -> None:
    agent = start_fargate(start_agent, fargate_setup)
    always = kube.create(aws_pod("always", agent.node_name, restart_policy="Always"))
    wait_for("Running", phase_is(kube, "always", "Running"))
    first = task_of(aws, fargate_setup, always)
    assert first is not None
    aws("ecs", "stop_task", cluster=fargate_setup.cluster, task=first["taskArn"], reason="exited")
    wait_for("task run again", lambda: "task restarted" in agent.logs(), timeout=30)
    restarted = restarted_once(kube, "always", timeout=15)
    assert restarted["status"]["phase"] == "Running"
    assert container(restarted)["lastState"]["terminated"]["exitCode"] == 0
    second = task_of(aws, fargate_setup, always)
    assert second is not None and second["taskArn"] != first["taskArn"]
    assert (
        restarted["status"]["podIP"]
        == {d["name"]: d["value"] for d in second["attachments"][0]["details"]}[
            "privateIPv4Address"
        ]
    )


def test_fargate_restart_adopts_tasks_and_removes_orphans(
    kube: Kube,
    start_agent: StartAgent,
    fargate_setup: FargateSetup,
    aws_proxy: AwsProxy,
    aws: Aws,
) -> None:
    agent = start_fargate(start_agent, fargate_setup)
    kept = kube.create(aws_pod("kept", agent.node_name, restart_policy="Always"))
    orphan = kube.create(aws_pod("orphan", agent.node_name))
    for name in ("kept", "orphan"):
        wait_for(f"{name} Running", phase_is(kube, name, "Running"))
    task = task_of(aws, fargate_setup, kept)
    assert task is not None
    agent.kill()
    kube.kubectl("delete", "pod", "orphan", "-n", kube.namespace, "--force", "--grace-period=0")
    runs_before = aws_proxy.counts["AmazonEC2ContainerServiceV20141113.RunTask"]
    agent.start()
    wait_for(
        "orphan task stopped",
        lambda: (t := task_of(aws, fargate_setup, orphan)) and t["lastStatus"] == "STOPPED",
        timeout=60,
    )
    family = task_family(ref_of(orphan))
    definition = aws("ecs", "describe_task_definition", taskDefinition=family)["taskDefinition"]
    assert definition["status"] == "INACTIVE"
    assert kube.phase("kept") == "Running"
    current = task_of(aws, fargate_setup, kept)
    assert current is not None and current["taskArn"] == task["taskArn"]
    assert aws_proxy.counts["AmazonEC2ContainerServiceV20141113.RunTask"] == runs_before
    assert "adopted backend pods" in agent.logs()


def test_fargate_converges_under_throttling_and_refuses_unrepresentable_pods(
    kube: Kube,
    start_agent: StartAgent,
    fargate_setup: FargateSetup,
    aws_proxy: AwsProxy,
    aws: Aws,
) -> None:
    aws_proxy.throttle_rate = 0.35
    agent = start_fargate(start_agent, fargate_setup, retry_attempts=3)
    for i in range(3):
        kube.create(aws_pod(f"t{i}", agent.node_name))
    bad = aws_pod("hostpath", agent.node_name)
    bad["spec"]["volumes"] = [{"name": "data", "hostPath": {"path": "/var/data"}}]
    kube.create(bad)
    for i in range(3):
        wait_for(f"t{i} Running", phase_is(kube, f"t{i}", "Running"), timeout=90)
    refused = cannot_start(kube, "hostpath")  # Pending, never Failed (issue 31)
    assert refused["reason"] == "CreateContainerError"
    assert refused["message"].startswith("UnsupportedVolume: ")
    assert "hostPath" in refused["message"]
    assert any("UnsupportedVolume" in e["message"] for e in refused["events"])
    for i in range(3):
        kube.kubectl("delete", "pod", f"t{i}", "-n", kube.namespace, "--wait=false")
    wait_for(
        "pods deleted",
        lambda: not [p for p in kube.list("pods") if p["metadata"]["name"].startswith("t")],
        timeout=120,
    )
    running = aws("ecs", "list_tasks", cluster=fargate_setup.cluster, desiredStatus="RUNNING")[
        "taskArns"
    ]
    assert running == []
    assert sum(aws_proxy.throttled.values()) >= 5
    print(f"throttled calls: {dict(aws_proxy.throttled)} of {dict(aws_proxy.counts)}")


def test_fargate_logs_follow_ends_when_the_task_stops(
    kube: Kube, start_agent: StartAgent, fargate_setup: FargateSetup, aws: Aws
) -> None:
    agent = start_fargate(start_agent, fargate_setup)
    created = kube.create(aws_pod("talker", agent.node_name))
    wait_for("Running", phase_is(kube, "talker", "Running"))
    task = task_of(aws, fargate_setup, created)
    assert task is not None
    stream = f"{task_family(ref_of(created))}/app/{task['taskArn'].rsplit('/', 1)[-1]}"
    aws.put_logs(fargate_setup.log_group, stream, "one")
    argv = kube.cluster.kubectl_argv("logs", "-f", "-n", kube.namespace, "talker")
    follower = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert follower.stdout is not None
        assert follower.stdout.readline() == b"one\n"
        aws.put_logs(fargate_setup.log_group, stream, "two")
        assert follower.stdout.readline() == b"two\n"
        aws.put_logs(fargate_setup.log_group, stream, "three")
        aws("ecs", "stop_task", cluster=fargate_setup.cluster, task=task["taskArn"], reason="done")
        rest, errors = follower.communicate(timeout=30)
        assert rest == b"three\n", errors
        assert follower.returncode == 0
    finally:
        if follower.poll() is None:
            follower.kill()
            follower.wait()
    wait_for("Succeeded", phase_is(kube, "talker", "Succeeded"))


def test_fargate_monitor_survives_an_answer_it_cannot_read(
    kube: Kube,
    start_agent: StartAgent,
    fargate_setup: FargateSetup,
    aws_proxy: AwsProxy,
    aws: Aws,
) -> None:
    """An answer the monitor chokes on (an exitCode that is not a number) used to end
    the monitor for good: the stopped task was never re-run and no status was pushed
    again while the node stayed Ready (issue 11, defect 8). The monitor is now
    restarted by its supervisor, so the pod restarts as its policy says."""
    agent = start_fargate(start_agent, fargate_setup)
    pod = kube.create(aws_pod("flaky", agent.node_name, restart_policy="OnFailure"))
    wait_for("Running", phase_is(kube, "flaky", "Running"))
    task = task_of(aws, fargate_setup, pod)
    assert task is not None
    garbled = 0

    def garble(call: Call, document: dict[str, Any]) -> dict[str, Any] | None:
        nonlocal garbled
        if not call.operation.endswith(".DescribeTasks") or garbled >= 2:
            return None
        for described in document.get("tasks") or []:
            if described.get("taskArn") == task["taskArn"] and described.get("lastStatus") == (
                "STOPPED"
            ):
                garbled += 1
                for container in described.get("containers") or []:
                    container["exitCode"] = "not a number"
        return document

    aws_proxy.rewrites.append(exit_code_rewrite(task["taskArn"], 1))
    aws_proxy.rewrites.append(garble)
    aws("ecs", "stop_task", cluster=fargate_setup.cluster, task=task["taskArn"], reason="exited")
    wait_for("the garbled answers", lambda: garbled >= 2, timeout=30)
    restarted = restarted_once(kube, "flaky", timeout=60)
    assert container(restarted)["lastState"]["terminated"]["exitCode"] == 1
    assert "background task failed" in agent.logs()
    assert 'task="fargate-monitor"' in agent.logs()
