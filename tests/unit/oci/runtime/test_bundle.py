"""A bundle's config.json: what runc reads, and who else may read it."""

from __future__ import annotations

import json
import stat
from pathlib import Path

from vkpy.oci.runtime import runc


def test_config_json_is_readable_by_its_owner_only(tmp_path: Path) -> None:
    spec = {"ociVersion": "1.0.2", "process": {"env": ["TOKEN=from-a-secret"]}}
    path = runc.write_bundle(tmp_path / "bundle", spec)
    assert path == tmp_path / "bundle" / "config.json"
    assert json.loads(path.read_text()) == spec
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    runc.write_bundle(tmp_path / "bundle", {"ociVersion": "1.0.2"})
    assert json.loads(path.read_text()) == {"ociVersion": "1.0.2"}
    assert sorted(p.name for p in (tmp_path / "bundle").iterdir()) == ["config.json"]
