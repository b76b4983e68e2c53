"""The pod → ECS task definition mapping, Fargate sizes, task state → pod state, restarts."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from vkpy.providers.aws.retry import RetryPolicy
from vkpy.providers.aws.settings import AwsSettings
from vkpy.providers.base import ContainerConfig, PodConfig, PodRef, VolumeConfig
from vkpy.providers.errors import AdmissionError, UnsupportedError
from vkpy.providers.fargate import sizes, task_definition
from vkpy.providers.fargate.config import FargateConfig
from vkpy.providers.fargate.records import PodTasks, shape_of
from vkpy.providers.fargate.status import TaskShape, pod_state

CONFIG = FargateConfig(aws=AwsSettings(retry=RetryPolicy()), subnets=("subnet-1",))


def container(name: str = "app", **spec: Any) -> ContainerConfig:
    return ContainerConfig(
        name, "busybox", tuple(spec.pop("command", ())), tuple(spec.pop("args", ())), spec=spec
    )


def pod(
    *containers: ContainerConfig,
    inits: tuple[ContainerConfig, ...] = (),
    volumes: tuple[VolumeConfig, ...] = (),
    grace: int | None = None,
    restart: str = "Never",
) -> PodConfig:
    spec: dict[str, Any] = {"restartPolicy": restart}
    if grace is not None:
        spec["terminationGracePeriodSeconds"] = grace
    return PodConfig(
        ref=PodRef("ns", "p", "uid"),
        pod={"metadata": {"labels": {"team": "x"}}, "spec": spec},
        init_containers=inits,
        containers=containers or (container(),),
        volumes=volumes,
    )


@pytest.mark.parametrize(
    ("cpu", "memory", "size"),
    [
        (0, 0, (256, 512)),
        (256, 512, (256, 512)),
        (300, 600, (512, 1024)),
        (256, 1500, (256, 2048)),
        (1024, 100, (1024, 2048)),
        (4096, 30000, (4096, 30720)),
        (8192, 60000, (8192, 61440)),
        (16384, 122880, (16384, 122880)),
        (16385, 0, None),
    ],
)
def test_cheapest_valid_fargate_size(cpu: int, memory: int, size: tuple[int, int] | None) -> None:
    assert sizes.fit(cpu, memory) == size


def test_task_definition_from_containers() -> None:
    app = container(
        command=["sh", "-c"],
        args=["run"],
        ports=[{"containerPort": 8080}, {"containerPort": 53, "protocol": "UDP"}],
        resources={"requests": {"cpu": "250m", "memory": "256Mi"}, "limits": {"memory": "512Mi"}},
        volumeMounts=[{"name": "scratch", "mountPath": "/data"}],
    )
    spec = task_definition.build(
        pod(app, volumes=(VolumeConfig("scratch", "emptyDir"),), grace=500),
        CONFIG,
        "node",
        "us-east-1",
    )
    params = spec.register_params()
    assert (params["cpu"], params["memory"]) == ("256", "512")
    assert params["requiresCompatibilities"] == ["FARGATE"]
    (definition,) = params["containerDefinitions"]  # type: ignore[misc]
    assert definition["entryPoint"] == ["sh", "-c"] and definition["command"] == ["run"]
    assert definition["cpu"] == 256
    assert (definition["memory"], definition["memoryReservation"]) == (512, 256)
    assert definition["portMappings"] == [
        {"containerPort": 8080, "protocol": "tcp"},
        {"containerPort": 53, "protocol": "udp"},
    ]
    assert definition["mountPoints"] == [
        {"sourceVolume": "scratch", "containerPath": "/data", "readOnly": False}
    ]
    assert definition["stopTimeout"] == 120
    assert definition["logConfiguration"]["options"]["awslogs-stream-prefix"] == spec.family
    assert params["volumes"] == [{"name": "scratch"}]
    assert spec.notes == ()
    assert {"key": "team", "value": "x"} in params["tags"]  # type: ignore[operator]


def test_init_containers_run_first_in_order() -> None:
    spec = task_definition.build(
        pod(container("a"), container("b"), inits=(container("i1"), container("i2"))),
        CONFIG,
        "n",
        "r",
    )
    by_name = {d["name"]: d for d in spec.params["containerDefinitions"]}  # type: ignore[attr-defined]
    assert by_name["i1"]["essential"] is False and "dependsOn" not in by_name["i1"]
    assert by_name["i2"]["dependsOn"] == [{"containerName": "i1", "condition": "SUCCESS"}]
    assert by_name["a"]["dependsOn"] == [{"containerName": "i2", "condition": "SUCCESS"}]
    assert by_name["a"]["essential"] is True
    shape = shape_of(dict(spec.params))
    assert (shape.app, shape.init) == (("a", "b"), ("i1", "i2"))


def test_rounding_up_is_noted_and_same_pod_same_digest() -> None:
    asking = pod(container(resources={"requests": {"cpu": "300m", "memory": "600Mi"}}))
    spec = task_definition.build(asking, CONFIG, "n", "r")
    assert (spec.cpu, spec.memory) == (512, 1024)
    assert spec.notes and "rounded up" in spec.notes[0]
    assert task_definition.build(asking, CONFIG, "n", "r").digest == spec.digest


@pytest.mark.parametrize(
    ("config", "error", "text"),
    [
        (pod(volumes=(VolumeConfig("c", "configMap"),)), UnsupportedError, "configMap"),
        (
            pod(container(ports=[{"containerPort": 1, "protocol": "SCTP"}])),
            UnsupportedError,
            "SCTP",
        ),
        (
            pod(inits=(container("side", restartPolicy="Always"),)),
            UnsupportedError,
            "sidecar",
        ),
        # never fits: an admission rejection (Failed), not a container that waits
        (pod(container(resources={"limits": {"cpu": "64"}})), AdmissionError, "largest"),
    ],
)
def test_unrepresentable_pods_are_refused(
    config: PodConfig, error: type[Exception], text: str
) -> None:
    with pytest.raises(error, match=text):
        task_definition.build(config, CONFIG, "n", "r")


SHAPE = TaskShape(app=("app",), images={"app": "busybox"})
NOW = datetime(2030, 1, 1, tzinfo=UTC)


def task(status: str, exit_code: int | None = None, **extra: Any) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "app", "lastStatus": status}
    if exit_code is not None:
        container["exitCode"] = exit_code
    return {
        "taskArn": "arn:aws:ecs:r:1:task/c/abc",
        "lastStatus": status,
        "createdAt": NOW,
        "containers": [container],
        "attachments": [
            {
                "type": "ElasticNetworkInterface",
                "details": [{"name": "privateIPv4Address", "value": "10.0.0.9"}],
            }
        ],
        **extra,
    }


def test_task_states_map_to_pod_phases() -> None:
    assert pod_state(task("PROVISIONING"), SHAPE).phase == "Pending"
    assert pod_state(task("PENDING"), SHAPE).containers[0].reason == "ContainerCreating"
    running = pod_state(task("RUNNING"), SHAPE)
    assert running.phase == "Running" and running.pod_ip == "10.0.0.9"
    assert running.containers[0].ready
    done = pod_state(task("STOPPED", 0, stoppedReason="Essential container in task exited"), SHAPE)
    assert (done.phase, done.containers[0].reason) == ("Succeeded", "Completed")
    failed = pod_state(task("STOPPED", 2, stoppedReason="exited"), SHAPE)
    assert (failed.phase, failed.message, failed.containers[0].exit_code) == ("Failed", "exited", 2)
    never = pod_state(
        task("STOPPED", stopCode="TaskFailedToStart", stoppedReason="CannotPullContainerError"),
        SHAPE,
    )
    assert (never.phase, never.reason) == ("Failed", "TaskFailedToStart")
    assert never.containers[0].exit_code == 128


def test_restart_policies_back_off_and_count_runs() -> None:
    record = PodTasks(
        ref=PodRef("ns", "p", "u"),
        definition_arn="arn",
        shape=SHAPE,
        restart_policy="OnFailure",
        task_arn="t1",
        task=task("RUNNING"),
    )
    assert not record.observe(task("RUNNING"), 100.0, 10, 300)
    assert record.observe(task("STOPPED", 0), 101.0, 10, 300)
    assert record.next_run_at is None  # OnFailure and it succeeded
    record.task = task("RUNNING")
    assert record.observe(task("STOPPED", 1), 102.0, 10, 300)
    assert record.next_run_at == 112.0
    waiting = pod_state(record.task or {}, SHAPE, record.restart_view())
    assert waiting.phase == "Running"
    assert waiting.containers[0].reason == "CrashLoopBackOff"
    assert waiting.containers[0].last_terminated is not None
    record.ran_again({**task("RUNNING"), "taskArn": "t2"})
    assert (record.restarts, record.previous_task_arn, record.task_arn) == (1, "t1", "t2")
    assert record.last["app"].exit_code == 1
    record.observe(task("STOPPED", 1), 200.0, 10, 300)
    assert record.next_run_at == 220.0  # doubled
    record.restarts = 10
    record.next_run_at = None
    record.observe(task("STOPPED", 1), 300.0, 10, 300)
    assert record.backoff == 300  # capped


def test_a_description_that_cannot_be_read_leaves_the_record_as_it_was() -> None:
    """The monitor is restarted after such an error (issue 11, defect 8); the record must
    still be live then, or the stopped task is never described or re-run again."""
    record = PodTasks(
        ref=PodRef("ns", "p", "u"),
        definition_arn="arn",
        shape=SHAPE,
        restart_policy="OnFailure",
        task_arn="t1",
        task=task("RUNNING"),
    )
    garbled = task("STOPPED", 1)
    garbled["containers"][0]["exitCode"] = "not a number"
    with pytest.raises(ValueError):
        record.observe(garbled, 100.0, 10, 300)
    assert record.live()
    assert record.observe(task("STOPPED", 1), 101.0, 10, 300)
    assert record.next_run_at == 111.0
