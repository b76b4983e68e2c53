"""The conformance run's JUnit report read back, and why each failed spec failed.

Ginkgo's JUnit file lists every spec of the suite, the ones the focus left out too
(as skipped). This reads it back (the selections choose specs with the same regular
expressions the run used; a spec may skip itself, e.g. for another cloud provider)
and says in one line why a spec failed: a known cause found in its name or in what
it logged, else the first line of its message with names and numbers blanked out,
so one cause reads the same for every spec it hits. results.py keeps the results.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass
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


SIM_OUTPUT = "no program runs (sim): the container's output is the sim's own log lines"
SIM_PROBES = "the sim's probes always succeed (no program to probe): none fails or restarts it"
SIM_CONTAINER = "sim://"
"""How the sim backend's container IDs begin (vkpy.providers.sim.timeline)."""
CAUSES: tuple[tuple[str, str, str], ...] = (
    (
        "logged",
        r"line \d+ of [\w.-]+ \(run \d+\) on std(out|err)",
        SIM_OUTPUT,
    ),
    (
        "sim-message",
        r'container "[^"]*" is not running \(terminated\)',
        "the sim ended the container (a pod that does not restart Always completes after "
        "`finite_run_seconds`) before the spec exec'd into it",
    ),
    ("sim-message", r"Unexpected websocket logs", SIM_OUTPUT),
    ("sim-message", r"found restarts: 0", SIM_PROBES),
    ("sim-name", r"(?i)probe that fails|probe timeout|startup probe fails", SIM_PROBES),
    ("sim-name", r"(?i)lifecycle hook|prestop|poststart", "the sim runs no lifecycle hooks"),
    ("sim-name", r"(?i)ephemeral container", "the sim does not start ephemeral containers"),
    (
        "sim-name",
        r"(?i)init containers? fail|always fails|terminated reason|termination message|"
        r"expected status",
        "every sim container exits 0: the sim cannot know that a program fails or what it writes",
    ),
    ("sim-name", r"(?i)communication", "nothing listens in a sim pod: it carries no traffic"),
    (
        "sim-message",
        r"Timed out after",
        "waited for what a running program does (output, files, a served port): the sim runs none",
    ),
    (
        "logged",
        r"outside this node's pod id range",
        "pod refused: its runAsUser/fsGroup is outside the node's pod id range",
    ),
    ("logged", r"asks to be privileged", "pod refused: privileged is never granted"),
    (
        "name",
        r"termination message (from file when|if TerminationMessagePath is set as non-root)",
        "the termination message file is not at its path in the pod's own root (/dev is the "
        "host's, read-only): the write fails",
    ),
    (
        "logged",
        r"is the own id of another pod",
        "pod refused: its runAsUser/fsGroup is another pod's own id",
    ),
    (
        "logged",
        r"Unknown device type|ip: RTNETLINK answers: Operation not supported",
        "the host's kernel has no `dummy` link type (`ip link add ... type dummy`)",
    ),
    (
        "logged",
        r"sh: line \d+: \S+: Read-only file system",
        "the busybox stand-in's sh is bash: its error message is not busybox's",
    ),
    (
        "logged",
        r"Effective uid: 0",
        "privileges are never raised here (no_new_privs): a set-uid program keeps the uid",
    ),
    ("name", r"(?i)grpc", "gRPC probe"),
    ("logged", r"address already in use", "port already in use (pods sharing the host network)"),
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
name, `logged` at its failure message and the containers' output it logged;
`sim-name` and `sim-message` at the name or the failure message, only for a spec that
ran on the sim backend (its pods' `sim://` container IDs are in what it logged)."""


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


def known_cause(spec: Spec) -> str | None:
    """The first CAUSES entry whose signature is in the spec's name or what it logged."""
    outputs = [line for line in spec.output.splitlines() if "output.go" in line or ": " in line]
    logged = "\n".join([spec.message, *outputs])
    on_sim = SIM_CONTAINER in spec.output or SIM_CONTAINER in spec.message
    for where, pattern, label in CAUSES:
        if where.startswith("sim-") and not on_sim:
            continue
        text = {"name": spec.name, "sim-name": spec.name, "sim-message": spec.message}.get(
            where, logged
        )
        if re.search(pattern, text):
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
