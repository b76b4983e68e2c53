"""What runs beside the control plane: metrics-server and the nodes `up` started.

The control plane's own state.json lists exactly its four components (that is how a
running cluster is recognised and reused), so the processes added on top of it live
in their own file, `<dir>/addons.json`: each with its ProcessRecord (PID plus kernel
start time, so `down` never signals a recycled PID) and, for a node, where its state
directory is, so the pods it left behind can be found and stopped too.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from .processes import ProcessRecord


@dataclass(frozen=True)
class Addon:
    """One process started on top of the control plane."""

    #: "metrics-server", or "node" for a vkpy node.
    kind: str
    process: ProcessRecord
    #: The node's state directory (its process backend keeps pods under it).
    state_dir: Path | None = None
    #: The kubelet API or serving port the process listens on.
    port: int = 0

    def to_json(self) -> dict[str, object]:
        return {
            "kind": self.kind,
            "process": self.process.to_json(),
            "state_dir": str(self.state_dir) if self.state_dir else None,
            "port": self.port,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, object]) -> Addon:
        process = data["process"]
        if not isinstance(process, Mapping):
            raise ValueError(f"bad addon record: {data!r}")
        state_dir = data.get("state_dir")
        port = data.get("port", 0)
        return cls(
            kind=str(data["kind"]),
            process=ProcessRecord.from_json(process),
            state_dir=Path(str(state_dir)) if state_dir else None,
            port=port if isinstance(port, int) else 0,
        )


@dataclass
class Addons:
    """The records in `<dir>/addons.json`; saved after every change."""

    path: Path
    items: list[Addon] = field(default_factory=list)

    @classmethod
    def load(cls, path: Path) -> Addons:
        try:
            data = json.loads(path.read_text())
        except FileNotFoundError:
            return cls(path)
        return cls(path, [Addon.from_json(a) for a in data])

    def save(self) -> None:
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps([a.to_json() for a in self.items], indent=2) + "\n")
        tmp.replace(self.path)

    def add(self, addon: Addon) -> None:
        self.items = [a for a in self.items if a.process.name != addon.process.name]
        self.items.append(addon)
        self.save()

    def named(self, name: str) -> Addon | None:
        return next((a for a in self.items if a.process.name == name), None)

    def of_kind(self, kind: str) -> list[Addon]:
        return [a for a in self.items if a.kind == kind]

    def remove(self, names: set[str]) -> None:
        self.items = [a for a in self.items if a.process.name not in names]
        self.save()
