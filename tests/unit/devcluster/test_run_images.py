"""What `make run` builds and serves by default: a user's images, not the suite's."""

from __future__ import annotations

from vkpy.devcluster.images import catalogue


def test_make_run_serves_a_users_images_and_not_the_suites() -> None:
    alone = catalogue.for_run(workers=False)
    assert {"busybox", "pause", "nginx", "agnhost"} <= set(alone)
    assert not set(alone) & {"nonroot", "nonewprivs", "glibc-dns-testing", "vkpy"}
    assert "vkpy" in catalogue.for_run(workers=True)  # the chart's, for the workers
    assert set(catalogue.for_run(workers=True)) <= set(catalogue.names())
