"""Getting an image into the node's store, with the kubelet's imagePullPolicy.

- `Never`: only what the store has; otherwise ErrImageNeverPull.
- `IfNotPresent`: the store's copy if there is one, without contacting a registry.
- `Always`: the registry is asked what the reference names now (its manifest digest);
  nothing is copied if the store has that already.
- no policy: the API server's default from the tag (reference.default_pull_policy).

skopeo does the registry protocol: it resolves a multi-arch index to the node's
platform (`--override-os/--override-arch/--override-variant`), uses the node's
mirrors (registries.py), checks every blob against its digest and reuses blobs the
store has. The pull copies by the digest it resolved, so a tag that moves meanwhile
cannot mix two images. Credentials go to skopeo in a 0600 auth file that is deleted
after, never on its command line; every matching credential is tried in turn, as the
kubelet does, and with none the pull is anonymous.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import os
import platform as host_platform
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from vkpy.oci.images import registries, tools
from vkpy.oci.images.credentials import Credential, Keyring
from vkpy.oci.images.errors import ImageNeverPullError, ImagePullError
from vkpy.oci.images.reference import ImageReference, default_pull_policy, parse
from vkpy.oci.images.store import ImageStore, StoredImage, write_file

POLICIES = ("Always", "IfNotPresent", "Never")
_ARCH = {"x86_64": ("amd64", ""), "aarch64": ("arm64", ""), "armv7l": ("arm", "v7"),
         "armv6l": ("arm", "v6"), "ppc64le": ("ppc64le", ""), "s390x": ("s390x", ""),
         "riscv64": ("riscv64", ""), "i686": ("386", "")}  # fmt: skip


@dataclass(frozen=True)
class Platform:
    os: str = "linux"
    architecture: str = "amd64"
    variant: str = ""


def node_platform() -> Platform:
    """This host's platform in OCI's (Go's) words."""
    machine = host_platform.machine()
    architecture, variant = _ARCH.get(machine, (machine, ""))
    return Platform("linux", architecture, variant)


@dataclass(frozen=True)
class PullResult:
    """What the Pulled event and the container status say."""

    ref: ImageReference
    image: StoredImage
    pulled: bool  # False: nothing was copied (the store had it)
    asked_registry: bool  # False: the store's copy, no registry contacted
    size: int  # bytes
    seconds: float  # the pull itself
    with_waiting: float  # and the wait for the pulls before it (one at a time)


class Puller:
    def __init__(
        self,
        store: ImageStore,
        hosts: tuple[registries.RegistryHost, ...] = (),
        platform: Platform | None = None,
        timeout: float = 600.0,
    ) -> None:
        self.store = store
        self.platform = platform or node_platform()
        self.timeout = timeout
        conf = registries.registries_conf(hosts)
        # Named by content: pullers with other settings on the same store never clash.
        self._conf = (
            store.root / f"registries-{hashlib.sha256(conf.encode()).hexdigest()[:12]}.conf"
        )
        write_file(self._conf, conf)
        self._serial = asyncio.Lock()  # the kubelet's serialized image puller

    async def ensure(
        self, image: str, policy: str | None = None, keyring: Keyring | None = None
    ) -> PullResult:
        """The image in the store as `policy` says; InvalidImageName, ErrImagePull or
        ErrImageNeverPull (typed, see errors.py) otherwise."""
        ref = parse(image)
        policy = policy or default_pull_policy(image)
        if policy not in POLICIES:
            raise ImagePullError(f"unknown imagePullPolicy {policy!r}")
        queued = self.store.clock.monotonic()
        present = self.store.lookup(str(ref))
        if policy == "Never" and present is None:
            raise ImageNeverPullError(
                f'Container image "{image}" is not present with pull policy of Never'
            )
        if present is not None and policy != "Always":
            return self._result(ref, present, False, False, queued, queued)
        async with self._serial:
            started = self.store.clock.monotonic()
            present = self.store.lookup(str(ref))  # a pull before this one may have got it
            if present is not None and policy != "Always":
                return self._result(ref, present, False, False, started, queued)
            found = keyring.lookup(ref) if keyring else []
            credentials: Sequence[Credential | None] = found or [None]
            errors = []
            for credential in credentials:
                try:
                    pulled = await self._pull(ref, credential, present)
                except ImagePullError as error:
                    errors.append(str(error))
                    continue
                copied = pulled is not present
                return self._result(ref, pulled, copied, True, started, queued)
        raise ImagePullError("; ".join(dict.fromkeys(errors)))

    def _result(
        self,
        ref: ImageReference,
        image: StoredImage,
        pulled: bool,
        asked: bool,
        started: float,
        queued: float,
    ) -> PullResult:
        self.store.mark_used([str(ref)])
        image = self.store.lookup(str(ref)) or image  # with its new last use
        now = self.store.clock.monotonic()
        return PullResult(ref, image, pulled, asked, image.size, now - started, now - queued)

    async def _pull(
        self, ref: ImageReference, credential: Credential | None, present: StoredImage | None
    ) -> StoredImage:
        with self._authfile(ref, credential) as auth:
            repo_digest = ref.digest or await self._resolve(ref, auth)
            pinned = f"{ref.name}@{repo_digest}"
            if present is not None and pinned in present.repo_digests:
                return present
            result = await self._skopeo(
                [
                    "copy",
                    "--quiet",
                    *(["--src-authfile", str(auth)] if auth else ["--src-no-creds"]),
                    f"docker://{pinned}",
                    f"oci:{self.store.layout_ref(str(ref))}",
                ],
                lock=True,
            )
        if result.returncode != 0:
            raise ImagePullError(f"pulling {ref}: {result.last_error()}")
        self.store.record(str(ref), pinned)
        if str(ref) != pinned:
            # Also under its digest (as containerd keeps repo digests): when the tag
            # moves on, the image a pod runs stays addressable by its imageID, and GC
            # keeps it while that is in use.
            tagged = await tools.run(
                [self.store.tools.umoci, "tag", "--image", self.store.layout_ref(str(ref)), pinned],
                lock=self.store.lock,
            )
            if tagged.returncode != 0:
                raise ImagePullError(f"storing {pinned}: {tagged.last_error()}")
            self.store.record(pinned, pinned)
        stored = self.store.lookup(str(ref))
        if stored is None:
            raise ImagePullError(f"pulling {ref}: skopeo left no {ref} in the store")
        return stored

    async def _resolve(self, ref: ImageReference, auth: Path | None) -> str:
        """The registry's digest for `ref` now (an index's, for a multi-arch image)."""
        result = await self._skopeo(
            [
                "inspect",
                "--raw",
                *(["--authfile", str(auth)] if auth else ["--no-creds"]),
                f"docker://{ref}",
            ]
        )
        if result.returncode != 0:
            raise ImagePullError(f"resolving {ref}: {result.last_error()}")
        return "sha256:" + hashlib.sha256(result.stdout).hexdigest()

    async def _skopeo(self, args: list[str], lock: bool = False) -> tools.ToolResult:
        flags = [
            "--registries-conf",
            str(self._conf),
            "--policy",
            str(self.store.policy),
            "--tmpdir",
            str(self.store.tmp),
            "--override-os",
            self.platform.os,
            "--override-arch",
            self.platform.architecture,
        ]
        if self.platform.variant:
            flags += ["--override-variant", self.platform.variant]
        return await tools.run(
            [self.store.tools.skopeo, *flags, *args],
            lock=self.store.lock if lock else None,
            env=tools.isolated_env(self.store.home),
            timeout=self.timeout,
        )

    def _authfile(self, ref: ImageReference, credential: Credential | None) -> _AuthFile:
        return _AuthFile(self.store.tmp, ref, credential)


class _AuthFile:
    """A containers-auth.json(5) file with one credential for the image's registry,
    readable by this user only, removed on exit; None without a credential."""

    def __init__(self, tmp: Path, ref: ImageReference, credential: Credential | None) -> None:
        self._tmp, self._ref, self._credential = tmp, ref, credential
        self._path: Path | None = None

    def __enter__(self) -> Path | None:
        if self._credential is None:
            return None
        token = f"{self._credential.username}:{self._credential.password}"
        document = {
            "auths": {self._ref.registry: {"auth": base64.b64encode(token.encode()).decode()}}
        }
        fd, name = tempfile.mkstemp(prefix="auth-", suffix=".json", dir=self._tmp)
        with os.fdopen(fd, "w") as file:
            json.dump(document, file)
        self._path = Path(name)
        return self._path

    def __exit__(self, *exc: object) -> None:
        if self._path is not None:
            self._path.unlink(missing_ok=True)
