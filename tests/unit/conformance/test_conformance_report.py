"""docs/conformance.md from conformance runs' JUnit files: which specs count, the
counts per selection and backend, a result per spec and backend that later runs
update (a rerun only for the specs it ran), a reason for each failure, and the text
around the results kept as people wrote it."""

from __future__ import annotations

import argparse
from datetime import UTC, datetime
from pathlib import Path

import pytest

from conformance import results
from conformance import run as conformance_run
from conformance.report import Selection, Spec, cause, known_cause, read_junit

JUNIT = """<?xml version="1.0" encoding="UTF-8"?>
<testsuites tests="6" failures="2">
  <testsuite name="Kubernetes e2e suite" tests="6">
    <testcase name="[SynchronizedBeforeSuite]" status="passed"></testcase>
    <testcase name="[It] [sig-node] Pods should get a host IP [NodeConformance] [Conformance]"
              status="passed"></testcase>
    <testcase name="[It] [sig-node] Pods should run on port 8080 [NodeConformance]"
              status="failed">
      <failure message="listen tcp :8080: bind: address already in use (pod web-1234-abcde)"
               type="failed">full text</failure>
    </testcase>
    <testcase name="[It] [sig-node] Pods should run on port 9090 [NodeConformance]"
              status="failed">
      <failure message="listen tcp :9090: bind: address already in use (pod api-77-xyz12)"
               type="failed">full text</failure>
    </testcase>
    <testcase name="[It] [sig-node] Pods should reboot [NodeConformance] [Disruptive]"
              status="failed"><failure message="never counted" type="failed"></failure>
    </testcase>
    <testcase name="[It] [sig-node] GCE only [NodeConformance]" status="skipped">
      <skipped message="skipped - Only supported for providers [gce] (not skeleton)"/>
    </testcase>
    <testcase name="[It] [sig-apps] Deployment rolls [Conformance]" status="skipped">
      <skipped message="skipped"/>
    </testcase>
    <testcase name="[It] [sig-cli] Kubectl client Simple pod should support exec [sig-cli]"
              status="passed"></testcase>
  </testsuite>
</testsuites>
"""

SELECTIONS = (
    Selection("NodeConformance", r"\[NodeConformance\]", "node"),
    Selection("sig-cli", r"\[sig-cli\] Kubectl client .*exec", "cli"),
)


def junit(tmp_path: Path) -> Path:
    path = tmp_path / "junit.xml"
    path.write_text(JUNIT)
    return path


def run(backend: str, kind: str, started: str = "2026-12-01 10:30") -> results.Run:
    return results.Run(backend, started, "make conformance", "v1.36.3", "abc1234", kind)


def test_counts_only_the_specs_each_selection_ran(tmp_path: Path) -> None:
    store = results.load(tmp_path / "results.json")
    counted = results.record(store, read_junit(junit(tmp_path)), SELECTIONS, run("process", "full"))
    assert counted == 5  # the Disruptive one and the one the focus left out do not count
    assert results.counts(store, SELECTIONS[0], "process") == (1, 2, 1)
    assert results.counts(store, SELECTIONS[1], "process") == (1, 0, 0)


def test_one_cause_for_failures_that_differ_only_in_names_and_numbers() -> None:
    first = cause("listen tcp :8080: bind: address already in use (pod web-1234-abcde)")
    second = cause("\nlisten tcp :9090: bind: address already in use (pod api-77-xyz12)\nmore")
    assert first == second
    assert "address already in use" in first


RERUN = """<?xml version="1.0" encoding="UTF-8"?>
<testsuites><testsuite name="Kubernetes e2e suite">
  <testcase name="[It] [sig-node] Pods should run on port 8080 [NodeConformance]"
            status="passed"></testcase>
</testsuite></testsuites>
"""


def test_a_rerun_updates_the_specs_it_ran_and_the_sim_backend_gets_a_column(
    tmp_path: Path,
) -> None:
    doc = tmp_path / "conformance.md"
    doc.write_text("# Conformance\n\nWritten by hand.\n\n<!-- results -->\nold\n"
                   "<!-- /results -->\n\n## History\n\nalso by hand\n")  # fmt: skip
    store = results.load(tmp_path / "results.json")
    results.record(store, read_junit(junit(tmp_path)), SELECTIONS, run("process", "full"))
    rerun = tmp_path / "rerun.xml"
    rerun.write_text(RERUN)
    results.record(
        store, read_junit(rerun), SELECTIONS, run("process", "rerun", "2026-12-01 14:00")
    )
    results.record(store, read_junit(junit(tmp_path)), SELECTIONS, run("sim", "full"))
    results.save(tmp_path / "results.json", store)
    store = results.load(tmp_path / "results.json")
    assert results.counts(store, SELECTIONS[0], "process") == (2, 1, 1)
    summary = results.update_document(doc, store, SELECTIONS)
    assert summary.startswith("NodeConformance on process: 2 passed, 1 failed")
    text = doc.read_text()
    assert "old" not in text
    assert text.startswith("# Conformance\n\nWritten by hand.\n")
    assert text.endswith("## History\n\nalso by hand\n")
    assert "| NodeConformance | process | 4 | 2 | 1 | 1 | 67% |" in text
    assert "| NodeConformance | sim | 4 | 1 | 2 | 1 | 33% |" in text
    assert "| 1 | process | 2026-12-01 14:00 | rerun | abc1234 | `make conformance` |" in text
    assert (
        "| [sig-node] Pods should run on port 8080 [NodeConformance] | passed (1) | failed (2) "
        "| sim: port already in use (pods sharing the host network) |"
    ) in text
    assert (
        "| [sig-node] Pods should run on port 9090 [NodeConformance] | failed (0) | failed (2) "
        "| process: port already in use (pods sharing the host network); sim: port already in"
    ) in text
    assert (
        "| [sig-cli] Kubectl client Simple pod should support exec | passed (0) | passed (2) |"
        in text
    )


def test_a_full_run_forgets_the_backends_earlier_results(tmp_path: Path) -> None:
    store = results.load(tmp_path / "results.json")
    results.record(store, read_junit(junit(tmp_path)), SELECTIONS, run("process", "full"))
    rerun = tmp_path / "rerun.xml"
    rerun.write_text(RERUN)
    results.record(store, read_junit(rerun), SELECTIONS, run("process", "full"))
    assert results.counts(store, SELECTIONS[0], "process") == (1, 0, 0)
    # ...of the selections it ran: the kubectl specs' results stay.
    assert results.counts(store, SELECTIONS[1], "process") == (1, 0, 0)


def test_a_known_cause_is_found_in_what_the_spec_logged() -> None:
    spec = Spec(
        "[sig-storage] Projected secret should be consumable from pods in volume",
        "failed",
        'expected pod "pod-projected-secrets-1" success: Told to stop trying after 2.0s.',
        'error reading file content for "/etc/projected-secret-volume/data-1": open '
        "/etc/projected-secret-volume/data-1: no such file or directory",
    )
    assert "mount path" in str(known_cause(spec))
    assert known_cause(Spec("[sig-node] Pods should do something", "failed", "boom")) is None


@pytest.mark.parametrize(
    ("name", "logged", "words"),
    [
        (
            "[sig-node] PrivilegedPod should enable privileged commands",
            'cmd [ip link add dummy1 type dummy], stderr "Error: Unknown device type."',
            "no `dummy` link type",
        ),
        (
            "[sig-node] Kubelet when scheduling a read only busybox container should not write",
            "Expected <string>: sh: line 1: /file: Read-only file system",
            "bash",
        ),
        (
            "[sig-node] Security Context when creating containers with AllowPrivilegeEscalation "
            "should allow privilege escalation when true",
            'expected "Effective uid: 0" in container output',
            "never raised",
        ),
        (
            "[sig-node] Container Runtime blackbox test on terminated container should report "
            "termination message if TerminationMessagePath is set as non-root user and at a "
            "non-default path",
            "Timed out",
            "termination message file",
        ),
        (
            "[sig-storage] EmptyDir volumes should support (non-root,0644,tmpfs)",
            "Expected\n    <string>: line 0 of test-container (run 0) on stdout\n"
            'to contain substring\n    <string>: mount type of "/test-volume": tmpfs',
            "no program runs",
        ),
        (
            "[sig-storage] EmptyDir volumes should support (non-root,0644,default)",
            "message: pod runAsUser 1001 is the own id of another pod on this node",
            "another pod's own id",
        ),
        (  # iproute2's words in an image (agnhost), busybox's on the host
            "[sig-node] PrivilegedPod [NodeConformance] should enable privileged commands",
            'stderr "ip: RTNETLINK answers: Operation not supported": command terminated',
            "no `dummy` link type",
        ),
    ],
)
def test_causes_of_this_nodes_limits_are_named(name: str, logged: str, words: str) -> None:
    assert words in str(known_cause(Spec(name, "failed", "failed", logged)))


def test_a_kept_run_recorded_later_keeps_its_backend_and_kind(tmp_path: Path) -> None:
    """`--from-run DIR` records a kept run as it was run: a sim rerun stays a sim
    rerun (updating the specs it ran), whatever flags the recording command has."""
    store_path = tmp_path / "results.json"
    store = results.load(store_path)
    node_specs = conformance_run.SELECTIONS[0]
    results.record(store, read_junit(junit(tmp_path)), (node_specs,), run("sim", "full"))
    results.save(store_path, store)
    kept = tmp_path / "kept"
    kept.mkdir()
    ran = argparse.Namespace(
        provider="sim", runtime="oci", rerun_failed=str(tmp_path / "earlier"), focus=""
    )
    started = datetime(2026, 12, 1, 14, 0, tzinfo=UTC)
    conformance_run.write_run_facts(kept, ran, started, "conformance/run.py --provider sim")
    (kept / "junit_node.xml").write_text(RERUN)

    recording = argparse.Namespace(
        provider="process",
        runtime="oci",
        rerun_failed="",
        focus="",
        results=str(store_path),
        report="",
    )
    assert conformance_run.record_run(recording, kept) == 0
    store = results.load(store_path)
    latest = store["runs"][-1]
    assert (latest["backend"], latest["kind"], latest["started"]) == (
        "sim",
        "rerun",
        "2026-12-01 14:00",
    )
    assert results.counts(store, node_specs, "sim") == (2, 1, 1)
    assert results.counts(store, node_specs, "process") == (0, 0, 0)


@pytest.mark.parametrize(
    ("name", "logged", "words"),
    [
        (
            "[sig-node] Probing container should be restarted with a exec liveness probe",
            "expected number of restarts: 1, found restarts: 0. containerID:sim://ab12",
            "probes always succeed",
        ),
        (
            "[sig-node] Container Lifecycle Hook should execute poststart exec hook properly",
            "Timed out after 300.000s. containerID:sim://ab12",
            "no lifecycle hooks",
        ),
        (
            "[sig-node] InitContainer should not start app containers if init containers fail",
            'container "run1" should not be out of waiting: {"containerID":"sim://ab12"}',
            "exits 0",
        ),
        (
            "[sig-storage] Projected configMap updates should be reflected in volume",
            "Timed out after 240.000s. containerID:sim://ab12",
            "the sim runs none",
        ),
        (
            "[sig-storage] EmptyDir volumes pod should support memory backed volumes",
            'failed to execute command: container "main" is not running (terminated) sim://ab',
            "before the spec exec'd",
        ),
    ],
)
def test_causes_on_the_sim_backend_are_named(name: str, logged: str, words: str) -> None:
    assert words in str(known_cause(Spec(name, "failed", logged, logged)))


def test_a_sim_cause_is_only_given_to_a_spec_that_ran_on_the_sim() -> None:
    on_process = Spec(
        "[sig-node] Container Lifecycle Hook should execute poststart exec hook properly",
        "failed",
        "Timed out after 300.000s.",
        "Timed out after 300.000s. containerID:process://ab12",
    )
    assert known_cause(on_process) is None


def test_a_selection_runs_alone_whole_with_its_own_procs(tmp_path: Path) -> None:
    """`--selection cli`: only the kubectl set, all of it, one spec at a time (its
    port-forward specs measure a forwarded connection), recorded as a full run of it."""
    options = argparse.Namespace(
        tools=str(tmp_path),
        procs=4,
        cli_procs=1,
        timeout="1h",
        focus="",
        rerun_failed="",
        selection=["cli"],
    )
    cluster = argparse.Namespace(kubectl="kubectl")
    [argv] = conformance_run.suite_runs(options, tmp_path, cluster)  # type: ignore[arg-type]
    cli = next(s for s in conformance_run.SELECTIONS if s.key == "cli")
    assert argv[1] == f"--focus={cli.focus}"
    assert "--procs=1" in argv
    assert "--json-report=report-cli.json" in argv
    assert conformance_run.run_kind(options) == "full"
    options.selection = []
    assert len(conformance_run.suite_runs(options, tmp_path, cluster)) == 2  # type: ignore[arg-type]
