"""Fixtures for the image tests: built busybox images, real registries, a store.

busybox        the OCI layout of the busybox image (tests/registry.py)
busybox_other  a second, different busybox image
registry       a docker-registry without auth, busybox pushed as
               library/busybox:1.35 (session-wide: push more under new names)
auth_registry  one with htpasswd auth (user `puller`, password AUTH_PASSWORD),
               busybox pushed as team/busybox:1.35
store          an empty image store in a fresh directory
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.registry import Registry, busybox_layout
from vkpy.oci.images.store import ImageStore

AUTH_USER = "puller"
AUTH_PASSWORD = "pa55-w0rd-never-logged"


@pytest.fixture(scope="session")
def busybox() -> Path:
    return busybox_layout()


@pytest.fixture(scope="session")
def busybox_other() -> Path:
    return busybox_layout("other")


@pytest.fixture(scope="session")
def registry(tmp_path_factory: pytest.TempPathFactory, busybox: Path) -> Iterator[Registry]:
    running = Registry(tmp_path_factory.mktemp("registry")).start()
    try:
        running.push(busybox, "library/busybox:1.35")
        yield running
    finally:
        running.stop()


@pytest.fixture(scope="session")
def auth_registry(tmp_path_factory: pytest.TempPathFactory, busybox: Path) -> Iterator[Registry]:
    running = Registry(tmp_path_factory.mktemp("auth-registry"), AUTH_USER, AUTH_PASSWORD).start()
    try:
        running.push(busybox, "team/busybox:1.35")
        yield running
    finally:
        running.stop()


@pytest.fixture
def store(tmp_path: Path) -> ImageStore:
    return ImageStore(tmp_path / "state" / "images")
