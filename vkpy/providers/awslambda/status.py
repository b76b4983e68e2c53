"""What a function's state means for its pod: the pure mapping to `PodState`.

Lambda reports a function's `State` (Pending while it is being created, Active when
it can be invoked, Inactive after weeks unused, Failed when it could not be set up)
and, separately, the outcome of the last update. A function is always ready to be
invoked once Active, so its pod is Running and Ready; a Failed function is a Failed
pod with Lambda's reason code and reason. Notes about what vkpy adjusted (memory
clamped, ...) become the pod's status message.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import datetime

from vkpy.core.rfc3339 import parse_or_none
from vkpy.providers.aws.clients import AwsObject
from vkpy.providers.base import ContainerState, PodState


def parse_time(value: object) -> datetime | None:
    """Lambda's `LastModified` ("2024-01-02T03:04:05.678+0000")."""
    if not isinstance(value, str):
        return None
    # RFC 3339 but for the offset's missing colon
    return parse_or_none(re.sub(r"([+-]\d{2})(\d{2})$", r"\1:\2", value))


def pod_state(
    configuration: AwsObject, container: str, image: str, note: str | None = None
) -> PodState:
    """The pod's state from a GetFunction `Configuration`."""
    state = str(configuration.get("State") or "Active")
    reason_code = configuration.get("StateReasonCode")
    reason = configuration.get("StateReason")
    started = parse_time(configuration.get("LastModified"))
    container_id = f"lambda://{configuration.get('FunctionName', '')}"
    image_id = str(configuration.get("CodeSha256") or "")
    messages = [m for m in (note,) if m]
    if configuration.get("LastUpdateStatus") == "Failed":
        messages.append(
            "last update failed: "
            f"{configuration.get('LastUpdateStatusReasonCode') or ''} "
            f"{configuration.get('LastUpdateStatusReason') or ''}".strip()
        )
    message = "; ".join(messages) or None
    if state == "Pending":
        return PodState(
            phase="Pending",
            message=message,
            containers=(
                ContainerState(
                    name=container,
                    state="waiting",
                    reason="ContainerCreating",
                    message=str(reason or "the function is being created"),
                    image=image,
                ),
            ),
        )
    if state == "Failed":
        code = str(reason_code or "FunctionFailed")
        text = str(reason or "Lambda could not create the function")
        return PodState(
            phase="Failed",
            reason=code,
            message=text,
            containers=(
                ContainerState(
                    name=container,
                    state="terminated",
                    reason=code,
                    message=text,
                    exit_code=128,
                    finished_at=started,
                    image=image,
                    image_id=image_id,
                    container_id=container_id,
                ),
            ),
        )
    return PodState(
        phase="Running",
        message=message,
        started_at=started,
        containers=(
            ContainerState(
                name=container,
                state="running",
                started_at=started,
                ready=True,
                started=True,
                image=image,
                image_id=image_id,
                container_id=container_id,
            ),
        ),
    )


def note_from_tags(tags: Mapping[str, str], key: str) -> str | None:
    return tags.get(key) or None
