"""The conformance run's JUnit report, summed up for docs/conformance.md.

Ginkgo's JUnit file lists every spec of the suite, the ones the focus left out too
(as skipped). This reads it back, keeps the specs each selection chose (the same
regular expressions the run used), counts passed, failed and skipped (a spec may skip
itself, e.g. for another cloud provider), groups the failures by the first line of
their message with names and numbers blanked out, so one cause shows once with its
count, and writes that between markers in the document (`<!-- run:<backend> -->`),
leaving the text around it as people wrote it.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

SKIP = re.compile(r"\[Serial\]|\[Disruptive\]|\[Slow\]|\[Flaky\]")
LABELS = re.compile(r" \[(sig-[\w-]+|[^\]]*, [^\]]*)\]$")
"""The label list Ginkgo appends to a spec's name in JUnit (`[sig-node, NodeConformance]`)."""
FAILED = frozenset({"failed", "panicked", "timedout", "interrupted", "aborted"})


@dataclass(frozen=True)
class Selection:
    """A named group of specs: those whose name matches `focus` (and not SKIP)."""

    name: str
    focus: str
    key: str = ""
    """Short name of its Ginkgo run (report files)."""

    def chooses(self, spec: str) -> bool:
        return re.search(self.focus, spec) is not None and SKIP.search(spec) is None


@dataclass(frozen=True)
class Spec:
    name: str
    status: str
    """passed, failed or skipped."""
    message: str = ""
    output: str = ""
    """What the spec logged (JUnit system-err): container output, Events, the failure."""


CAUSES: tuple[tuple[str, str, str], ...] = (
    ("name", r"(?i)grpc", "gRPC probe"),
    ("logged", r"address already in use", "port already in use: pods share one network"),
    (
        "name",
        r"(?i)\btmpfs\b|memory backed|medium.?memory",
        "emptyDir `medium: Memory` (a tmpfs) not provided",
    ),
    ("name", r"/etc/hosts|etc-hosts|EtcHosts", "kubelet-managed /etc/hosts not provided"),
    (
        "name",
        r"(?i)non-?root|runAsUser|runAsGroup|FSGroup|as root|"
        r"readOnlyRootFilesystem|read only busybox|privileged|allowPrivilegeEscalation",
        "securityContext user, group or privileges not applied",
    ),
    (
        "logged",
        r"/[\w./-]+\W{0,3}: no such file or directory",
        "the container reads its volume at the mount path: the host's file system, not the pod's",
    ),
    ("logged", r"/agnhost: (No such file|not found)", "a script runs the image's /agnhost"),
    ("name", r"(?i)hostname", "hostname: the host's, not the pod's"),
    ("name", r"(?i)sysctl", "sysctls"),
)
"""Known causes: (where, signature, cause), first match wins; `name` looks at the spec's
name, `logged` at its failure message and the containers' output it logged."""


@dataclass
class Tally:
    passed: int = 0
    failed: int = 0
    skipped: int = 0
    specs: list[Spec] = field(default_factory=list)

    @property
    def total(self) -> int:
        return self.passed + self.failed + self.skipped


def read_junit(path: Path) -> list[Spec]:
    """The specs that ran (`[It]` cases), with their outcome and failure message."""
    specs: list[Spec] = []
    for case in ET.parse(path).getroot().iter("testcase"):
        name = case.get("name", "")
        if not name.startswith("[It] "):
            continue
        name = LABELS.sub("", name.removeprefix("[It] "))
        status = case.get("status", "")
        failure = case.find("failure")
        error = case.find("error")
        skipped = case.find("skipped")
        if status in FAILED or failure is not None or error is not None:
            node = failure if failure is not None else error
            message = node.get("message", "") if node is not None else status
            if not message and node is not None:
                message = node.text or ""
            parts = (case.find("system-err"), case.find("system-out"))
            output = "\n".join(part.text or "" for part in parts if part is not None)
            specs.append(Spec(name, "failed", message, output))
        elif status == "skipped" or skipped is not None:
            message = skipped.get("message", "") if skipped is not None else ""
            specs.append(Spec(name, "skipped", message))
        else:
            specs.append(Spec(name, "passed"))
    return specs


def tally(specs: list[Spec], selection: Selection) -> Tally:
    """The selection's counts; specs the focus left out (skipped with no reason) are not counted."""
    result = Tally()
    for spec in specs:
        if not selection.chooses(spec.name):
            continue
        if spec.status == "skipped" and spec.message.strip() in ("", "skipped"):
            continue  # not run: filtered out by the focus
        result.specs.append(spec)
        if spec.status == "passed":
            result.passed += 1
        elif spec.status == "failed":
            result.failed += 1
        else:
            result.skipped += 1
    return result


def known_cause(spec: Spec) -> str | None:
    """The first CAUSES entry whose signature is in the spec's name or what it logged."""
    outputs = [line for line in spec.output.splitlines() if "output.go" in line or ": " in line]
    logged = "\n".join([spec.message, *outputs])
    for where, pattern, label in CAUSES:
        if re.search(pattern, spec.name if where == "name" else logged):
            return label
    return None


def cause(message: str) -> str:
    """The failure's first meaningful line with names, numbers and quoted values blanked."""
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    first = lines[0] if lines else "(no message)"
    first = re.sub(r'"[^"]*"', '"…"', first)
    first = re.sub(r"'[^']*'", "'…'", first)
    first = re.sub(r"\b[0-9a-f]{8}-[0-9a-f-]{27}\b", "UID", first)
    first = re.sub(r"\b[a-z0-9]+(-[a-z0-9]+)*-[a-z0-9]{5}\b", "NAME", first)
    first = re.sub(r"\d+(\.\d+)?", "N", first)
    return first[:200]


def _escape(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render(
    tallies: dict[str, Tally],
    *,
    started: datetime,
    command: str,
    provider: str,
    release: str,
    procs: int,
) -> str:
    lines = [
        f"### {provider} backend, {started:%Y-%m-%d %H:%M} UTC",
        "",
        f"Command: `{command}` (Kubernetes {release}: e2e.test and agnhost built from "
        f"k8s.io/kubernetes {release}; {procs} specs in parallel; skip "
        "`Serial|Disruptive|Slow|Flaky`).",
        "",
        "| selection | specs run | passed | failed | skipped |",
        "|---|---:|---:|---:|---:|",
    ]
    for name, result in tallies.items():
        lines.append(
            f"| {name} | {result.total} | {result.passed} | {result.failed} | {result.skipped} |"
        )
    causes: dict[str, list[str]] = defaultdict(list)
    seen: set[str] = set()
    for result in tallies.values():
        for spec in result.specs:
            if spec.status == "failed" and spec.name not in seen:
                seen.add(spec.name)
                causes[known_cause(spec) or cause(spec.message)].append(spec.name)
    if causes:
        lines += [
            "",
            "Failures grouped by cause (a known signature in the spec's name, message or "
            "output, else the message's first line):",
            "",
            "| count | cause | specs |",
            "|---:|---|---|",
        ]
        for text, names in sorted(causes.items(), key=lambda item: (-len(item[1]), item[0])):
            shown = "<br>".join(_escape(n) for n in sorted(names))
            lines.append(f"| {len(names)} | {_escape(text)} | {shown} |")
    for name, result in tallies.items():
        lines += ["", f"<details><summary>Every {name} spec ({result.total})</summary>", ""]
        lines += ["| result | spec |", "|---|---|"]
        for spec in sorted(result.specs, key=lambda s: (s.status != "failed", s.status, s.name)):
            lines.append(f"| {spec.status} | {_escape(spec.name)} |")
        lines += ["", "</details>"]
    return "\n".join(lines)


def write_report(
    path: Path,
    junits: list[Path],
    selections: tuple[Selection, ...],
    *,
    started: datetime,
    command: str,
    provider: str,
    release: str,
    procs: int,
) -> str:
    """Put this run's section into `path` (replacing the last run of this backend);
    returns a one-line summary."""
    specs = [spec for junit in junits for spec in read_junit(junit)]
    tallies = {s.name: tally(specs, s) for s in selections}
    section = render(
        tallies, started=started, command=command, provider=provider, release=release, procs=procs
    )
    begin, end = f"<!-- run:{provider} -->", f"<!-- /run:{provider} -->"
    text = path.read_text() if path.exists() else "# Conformance\n"
    block = f"{begin}\n{section}\n{end}"
    if begin in text and end in text:
        head, rest = text.split(begin, 1)
        text = head + block + rest.split(end, 1)[1]
    else:
        text = text.rstrip("\n") + "\n\n" + block + "\n"
    path.write_text(text)
    return "; ".join(
        f"{name}: {t.passed} passed, {t.failed} failed, {t.skipped} skipped of {t.total}"
        for name, t in tallies.items()
    )
