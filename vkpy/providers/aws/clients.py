"""One aiobotocore session and long-lived clients for a backend, and typed calls on them.

Creating an AWS client is costly (it loads service models and opens a connection
pool), so a backend opens the clients it needs once in `start` and closes them in
`close`. Every call goes through `AwsClients.call`, which applies the retry policy
(botocore's own retries are off), reads streamed bodies so no connection is left
open, and returns the decoded answer as a plain dict, the same way vkpy keeps
Kubernetes objects. Region and credentials come from the standard AWS chain unless
the settings name them; `endpoint_url` points every client at an emulator.
"""

from __future__ import annotations

import contextlib
import logging
import random
from collections.abc import Sequence
from typing import Any

from aiobotocore.config import AioConfig
from aiobotocore.response import StreamingBody
from aiobotocore.session import AioSession

from vkpy import __version__
from vkpy.core.clock import SYSTEM_CLOCK, Clock
from vkpy.providers.aws.retry import with_retries
from vkpy.providers.aws.settings import AwsSettings
from vkpy.providers.errors import ProviderError

log = logging.getLogger(__name__)

AwsObject = dict[str, Any]
"""An AWS API answer (or part of one) as botocore decoded it. Never mutated in place."""


class AwsClients:
    """The clients of the named services, open between `start` and `close`."""

    def __init__(
        self,
        settings: AwsSettings,
        services: Sequence[str],
        *,
        clock: Clock = SYSTEM_CLOCK,
        rng: random.Random | None = None,
    ) -> None:
        self._settings = settings
        self._services = tuple(services)
        self._clock = clock
        self._rng = rng or random.Random()
        self._stack = contextlib.AsyncExitStack()
        self._clients: dict[str, Any] = {}
        self.region = settings.region or ""
        """The region in use (known after `start`)."""

    async def start(self) -> None:
        session = AioSession(profile=self._settings.profile)
        region = self._settings.region or session.get_config_variable("region")
        if not region:
            raise ProviderError(
                "no AWS region: set `region` in the provider config, AWS_REGION or a profile",
                reason="AwsConfigError",
            )
        self.region = str(region)
        config = AioConfig(
            connect_timeout=self._settings.connect_timeout,
            read_timeout=self._settings.read_timeout,
            retries={"total_max_attempts": 1, "mode": "standard"},
            user_agent_extra=f"vkpy/{__version__}",
        )
        try:
            for service in self._services:
                client = session.create_client(
                    service,
                    region_name=self.region,
                    endpoint_url=self._settings.endpoint_url,
                    config=config,
                )
                self._clients[service] = await self._stack.enter_async_context(client)
        except BaseException:
            await self.close()
            raise
        log.info(
            "AWS clients open",
            extra={
                "services": ",".join(self._services),
                "region": self.region,
                "endpoint": self._settings.endpoint_url or "aws",
            },
        )

    async def close(self) -> None:
        self._clients.clear()
        await self._stack.aclose()

    async def call(self, service: str, operation: str, /, **params: object) -> AwsObject:
        """`<service>.<operation>(**params)` with retries; raises ProviderErrors only."""
        return await self._call(service, operation, params, only_throttling=False)

    async def call_once(self, service: str, operation: str, /, **params: object) -> AwsObject:
        """Like `call`, for calls that must not run twice (Invoke): only refusals
        (throttling) are retried, never failures that may have happened after the work."""
        return await self._call(service, operation, params, only_throttling=True)

    async def _call(
        self, service: str, operation: str, params: dict[str, object], *, only_throttling: bool
    ) -> AwsObject:
        client = self._clients.get(service)
        if client is None:
            raise ProviderError(f"AWS client {service} is not open")
        method = getattr(client, operation)

        async def once() -> AwsObject:
            response: AwsObject = dict(await method(**params))
            for key, value in list(response.items()):
                if isinstance(value, StreamingBody):
                    response[key] = await value.read()
            return response

        return await with_retries(
            once,
            f"{service}:{operation}",
            self._settings.retry,
            clock=self._clock,
            rng=self._rng,
            only_throttling=only_throttling,
        )
