"""docs/conformance.md from a conformance run's JUnit file: which specs count, the
counts per selection, failures grouped by cause, and the text around the run's
section kept as people wrote it."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from conformance.report import Selection, Spec, cause, known_cause, read_junit, tally, write_report

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
    Selection("NodeConformance", r"\[NodeConformance\]"),
    Selection("sig-cli", r"\[sig-cli\] Kubectl client .*exec"),
)


def junit(tmp_path: Path) -> Path:
    path = tmp_path / "junit.xml"
    path.write_text(JUNIT)
    return path


def test_counts_only_the_specs_each_selection_ran(tmp_path: Path) -> None:
    specs = read_junit(junit(tmp_path))
    node = tally(specs, SELECTIONS[0])
    assert (node.passed, node.failed, node.skipped) == (1, 2, 1)
    cli = tally(specs, SELECTIONS[1])
    assert (cli.passed, cli.failed, cli.skipped) == (1, 0, 0)


def test_one_cause_for_failures_that_differ_only_in_names_and_numbers() -> None:
    first = cause("listen tcp :8080: bind: address already in use (pod web-1234-abcde)")
    second = cause("\nlisten tcp :9090: bind: address already in use (pod api-77-xyz12)\nmore")
    assert first == second
    assert "address already in use" in first


def test_the_report_replaces_its_own_section_and_keeps_the_rest(tmp_path: Path) -> None:
    doc = tmp_path / "conformance.md"
    doc.write_text("# Conformance\n\nWritten by hand.\n\n<!-- run:process -->\nold\n"
                   "<!-- /run:process -->\n\n## History\n\nalso by hand\n")  # fmt: skip
    summary = write_report(
        doc,
        [junit(tmp_path)],
        SELECTIONS,
        started=datetime(2026, 12, 1, 10, 30, tzinfo=UTC),
        command="make conformance",
        provider="process",
        release="v1.36.3",
        procs=4,
    )
    assert summary.startswith("NodeConformance: 1 passed, 2 failed, 1 skipped of 4")
    text = doc.read_text()
    assert "old" not in text
    assert text.startswith("# Conformance\n\nWritten by hand.\n")
    assert text.endswith("## History\n\nalso by hand\n")
    assert "| NodeConformance | 4 | 1 | 2 | 1 |" in text
    assert "| 2 | port already in use: pods share one network |" in text
    assert "2026-12-01 10:30 UTC" in text
    assert "| passed | [sig-cli] Kubectl client Simple pod should support exec |" in text


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
