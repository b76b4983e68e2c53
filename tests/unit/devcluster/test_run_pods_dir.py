"""Where `make run`'s node keeps its pods as root (nodes.reachable_pods_dir): outside the
cluster directory, reachable by any id, linked from the node's state for `down`, and
removed once the cluster directory it belongs to is gone."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from vkpy.devcluster import nodes


def test_pods_live_where_any_id_reaches_them_linked_from_the_node(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "var" / "devcluster"
    (tmp_path / "var").mkdir()
    monkeypatch.setattr(nodes, "RUN_PODS_ROOT", root)
    closed = tmp_path / "home"
    closed.mkdir(mode=0o700)
    node_dir = closed / "cluster" / "nodes" / "vkpy-dev"
    pods = nodes.reachable_pods_dir(node_dir)
    assert pods.parent.parent == root and pods.is_dir()
    for directory in (root, pods.parent, pods):
        assert stat.S_IMODE(directory.stat().st_mode) == 0o711
    link = node_dir / "state" / "process" / "pods"
    assert link.is_symlink() and link.resolve() == pods.resolve()
    # The same node directory finds the same place again; another gets its own.
    assert nodes.reachable_pods_dir(node_dir) == pods
    other = nodes.reachable_pods_dir(closed / "other" / "nodes" / "vkpy-dev")
    assert other != pods
    (pods / "a-pod").mkdir()
    # Its cluster directory gone (a test's temporary one): removed at the next start.
    for path in sorted((closed / "cluster").rglob("*"), reverse=True):
        path.unlink() if path.is_symlink() or path.is_file() else path.rmdir()
    (closed / "cluster").rmdir()
    nodes.reachable_pods_dir(closed / "other" / "nodes" / "vkpy-dev")
    assert not pods.parent.exists()
    assert other.is_dir()


def test_only_nodes_that_run_images_get_a_pods_dir_out_there() -> None:
    root = os.geteuid() == 0
    assert nodes.runs_images("process", {}) is root
    assert nodes.runs_images(None, {"registries": {}}) is root
    assert nodes.runs_images("process", {"runtime": "oci"}) is root
    assert not nodes.runs_images("process", {"runtime": "host"})
    assert not nodes.runs_images("sim", {})
    host = nodes.host_programs(nodes.worker(1))
    assert host.provider_config["runtime"] == "host"
    assert not nodes.runs_images(host.provider, host.provider_config)
