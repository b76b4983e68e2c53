"""The chart's small commands (uninstall hook, CSR approver) refuse to start
without a kubeconfig outside a cluster, saying so, before touching anything."""

from __future__ import annotations

import pytest

from vkpy.tools import approver, uninstall


@pytest.mark.parametrize(
    ("module", "argv"),
    [
        (uninstall, ["--node-name=n", "--namespace=ns", "--deployment=d", "--selector=a=b"]),
        (approver, []),
    ],
    ids=["uninstall", "approver"],
)
def test_no_kubeconfig_outside_a_cluster_is_refused(
    module: object,
    argv: list[str],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    assert module.main([*argv, "--log-format=text"]) == 2  # type: ignore[attr-defined]
    name = module.__name__  # type: ignore[attr-defined]
    assert f"{name}: error: no --kubeconfig and not running in a cluster" in capsys.readouterr().err
