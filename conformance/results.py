"""Every spec's latest result per backend, kept across runs, and the table of them.

A full run of the suite takes about an hour on two shared cores, a rerun of its
failures (or a focused run) answers for a part of it, and the sim backend runs on
its own. So the results live in one file (docs/conformance-results.json) that each
run updates for the specs it ran (a full run of a backend first forgets that
backend's earlier results of the selections it ran), with the run each result came
from. docs/conformance.md shows them together between `<!-- results -->` markers:
counts per selection and backend, the runs, and a row per spec with a column per
backend and, for a spec that does not pass, why, in one line.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TypedDict

from conformance.report import Selection, Spec, cause, known_cause

BACKENDS = ("process-oci", "process", "sim")
BEGIN, END = "<!-- results -->", "<!-- /results -->"


@dataclass(frozen=True)
class Run:
    """One invocation of conformance/run.py."""

    backend: str
    started: str
    """UTC, `YYYY-MM-DD HH:MM`."""
    command: str
    release: str
    commit: str
    kind: str
    """`full` (every selected spec), `rerun` (the failures of an earlier run) or `focus`."""


class Result(TypedDict):
    status: str
    reason: str
    run: int
    """Index into the store's runs."""


class Entry(TypedDict):
    selection: str
    results: dict[str, Result]
    """Per backend."""


class Store(TypedDict):
    runs: list[dict[str, str]]
    specs: dict[str, Entry]


def load(path: Path) -> Store:
    if not path.exists():
        return {"runs": [], "specs": {}}
    data: Store = json.loads(path.read_text())
    return data


def save(path: Path, store: Store) -> None:
    path.write_text(json.dumps(store, indent=1, sort_keys=True) + "\n")


def reason(spec: Spec) -> str:
    """One line on why a spec did not pass (empty for a pass)."""
    if spec.status == "passed":
        return ""
    if spec.status == "skipped":
        return spec.message.strip().splitlines()[0][:200] if spec.message.strip() else "skipped"
    return known_cause(spec) or cause(spec.message)


def record(store: Store, specs: list[Spec], selections: tuple[Selection, ...], run: Run) -> int:
    """Put a run's results in the store; returns how many specs it answered for.
    Specs the run's focus left out (skipped without a reason) are not results."""
    ran = []
    for spec in specs:
        chosen = next((s for s in selections if s.chooses(spec.name)), None)
        if chosen is None or (spec.status == "skipped" and spec.message.strip() in ("", "skipped")):
            continue
        ran.append((spec, chosen))
    if run.kind == "full":  # forget the backend's results of the selections this run covered
        covered = {chosen.key for _, chosen in ran}
        for entry in store["specs"].values():
            if entry["selection"] in covered:
                entry["results"].pop(run.backend, None)
    store["runs"].append(asdict(run))
    index = len(store["runs"]) - 1
    counted = 0
    for spec, chosen in ran:
        entry = store["specs"].setdefault(spec.name, {"selection": chosen.key, "results": {}})
        entry["results"][run.backend] = {
            "status": spec.status,
            "reason": reason(spec),
            "run": index,
        }
        counted += 1
    return counted


def _escape(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def counts(store: Store, selection: Selection, backend: str) -> tuple[int, int, int]:
    """(passed, failed, skipped) of the selection's specs on the backend."""
    passed = failed = skipped = 0
    for entry in store["specs"].values():
        result = entry["results"].get(backend) if entry["selection"] == selection.key else None
        if result is None:
            continue
        status = result["status"]
        passed += status == "passed"
        skipped += status == "skipped"
        failed += status not in ("passed", "skipped")
    return passed, failed, skipped


def render(store: Store, selections: tuple[Selection, ...]) -> str:
    lines = [
        "| selection | backend | specs | passed | failed | skipped | passed of those run |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for selection in selections:
        for backend in BACKENDS:
            passed, failed, skipped = counts(store, selection, backend)
            total = passed + failed + skipped
            if not total:
                continue
            share = f"{100 * passed / (passed + failed):.0f}%" if passed + failed else "-"
            lines.append(
                f"| {selection.name} | {backend} | {total} | {passed} | {failed} | {skipped} "
                f"| {share} |"
            )
    lines += ["", "Runs (a result's run is its number in the table below):", ""]
    lines += [
        "| # | backend | started (UTC) | kind | commit | command |",
        "|---:|---|---|---|---|---|",
    ]
    for number, run in enumerate(store["runs"]):
        lines.append(
            f"| {number} | {run['backend']} | {run['started']} | {run['kind']} "
            f"| {run['commit']} | `{_escape(run['command'])}` |"
        )
    shown = [b for b in BACKENDS if any(b in e["results"] for e in store["specs"].values())]
    for selection in selections:
        names = sorted(
            (name for name, e in store["specs"].items() if e["selection"] == selection.key),
            key=lambda name: (_order(store["specs"][name]), name),
        )
        lines += [
            "",
            f"<details><summary>Every {selection.name} spec ({len(names)})</summary>",
            "",
            f"| spec | {' | '.join(shown)} | why not |",
            "|---|" + "---|" * len(shown) + "---|",
        ]
        for name in names:
            results = store["specs"][name]["results"]
            cells = [_cell(results.get(b)) for b in shown]
            why = [
                f"{b}: {results[b]['reason']}"
                for b in shown
                if b in results and results[b]["status"] != "passed"
            ]
            lines.append(f"| {_escape(name)} | {' | '.join(cells)} | {_escape('; '.join(why))} |")
        lines += ["", "</details>"]
    return "\n".join(lines)


def _cell(result: Result | None) -> str:
    if result is None:
        return "not run"
    return f"{result['status']} ({result['run']})"


def _order(entry: Entry) -> int:
    """Specs failing on the process backend first (on real images, else host programs)."""
    process = entry["results"].get("process-oci") or entry["results"].get("process")
    return 0 if process is not None and process["status"] not in ("passed", "skipped") else 1


def update_document(doc: Path, store: Store, selections: tuple[Selection, ...]) -> str:
    """Replace the results section of `doc` (or append one); returns a summary line."""
    text = doc.read_text() if doc.exists() else "# Conformance\n"
    block = f"{BEGIN}\n{render(store, selections)}\n{END}"
    if BEGIN in text and END in text:
        head, rest = text.split(BEGIN, 1)
        text = head + block + rest.split(END, 1)[1]
    else:
        text = text.rstrip("\n") + "\n\n" + block + "\n"
    doc.write_text(text)
    parts = []
    for selection in selections:
        for backend in BACKENDS:
            passed, failed, skipped = counts(store, selection, backend)
            if passed + failed + skipped:
                parts.append(f"{selection.name} on {backend}: {passed} passed, {failed} failed")
    return "; ".join(parts)
