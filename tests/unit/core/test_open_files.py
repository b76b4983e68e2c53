"""The agent raises its soft open-file limit as Go's runtime does for the kubelet, and
keeps a reserve of it from the kubelet API's connections."""

from __future__ import annotations

import resource
from collections.abc import Iterator

import pytest

from vkpy.core import open_files


@pytest.fixture
def lowered() -> Iterator[tuple[int, int]]:
    """This process's soft limit set below its hard one for the test, then restored."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    low = min(soft, 512)
    if hard != resource.RLIM_INFINITY and hard <= low:
        pytest.fail(f"the hard open-file limit ({hard}) leaves nothing to raise to")
    resource.setrlimit(resource.RLIMIT_NOFILE, (low, hard))
    try:
        yield low, hard
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_the_soft_limit_is_raised_to_the_hard_one(lowered: tuple[int, int]) -> None:
    low, hard = lowered
    assert open_files.soft_limit() == low
    raised = open_files.raise_soft_limit()
    expected = open_files.CEILING if hard == resource.RLIM_INFINITY else hard
    assert raised == expected
    assert resource.getrlimit(resource.RLIMIT_NOFILE) == (expected, hard)


@pytest.mark.parametrize(
    ("limit", "budget"),
    [(1024, 512), (4096, 3072), (1 << 20, (1 << 20) - 1024), (100, 64)],
)
def test_the_kubelet_api_leaves_a_reserve_of_the_limit(limit: int, budget: int) -> None:
    assert open_files.connection_budget(limit) == budget
