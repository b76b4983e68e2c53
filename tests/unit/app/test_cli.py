"""Flags, environment variables and the errors a user sees before anything starts."""

import ssl
from pathlib import Path

import pytest

from vkpy.app import cli
from vkpy.node.settings import Taint


def kubeconfig(tmp_path: Path, server: str = "https://127.0.0.1:6443") -> Path:
    path = tmp_path / "kubeconfig"
    path.write_text(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n"
        f"    server: {server}\ncontexts: []\nusers: []\n"
    )
    return path


def settings(tmp_path: Path, *args: str) -> cli.Settings:
    parsed = cli.parser().parse_args([f"--kubeconfig={kubeconfig(tmp_path)}", *args])
    return cli.settings_from_args(parsed)


def test_defaults(tmp_path: Path) -> None:
    s = settings(tmp_path, "--provider=sim")
    assert s.node.name == "vkpy"
    assert s.node.taints == (Taint("virtual-kubelet.io/provider", "sim", "NoSchedule"),)
    assert s.node.internal_ip == ""  # found from the loaded client (runner.with_node_address)
    assert s.node.lease_duration == 40
    assert s.node.lease_renew_interval == 10


def test_taints_can_be_set_or_removed(tmp_path: Path) -> None:
    assert settings(tmp_path, "--taint=none").node.taints == ()
    two = settings(tmp_path, "--taint=a=b:NoExecute", "--taint=c:NoSchedule").node.taints
    assert two == (Taint("a", "b", "NoExecute"), Taint("c", "", "NoSchedule"))


def test_environment_variables_set_flags(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VKPY_NODE_NAME", "from-env")
    monkeypatch.setenv("VKPY_POD_SYNC_WORKERS", "7")
    s = settings(tmp_path)
    assert s.node.name == "from-env"
    assert s.pods.workers == 7


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--taint=oops"], "invalid taint 'oops'"),
        (["--provider=nope"], "unknown --provider 'nope'"),
        (["--port=70000"], "is not a port number"),
        (["--label=novalue"], "invalid --label"),
        (["--provider-config=/nonexistent.yaml"], "cannot read --provider-config"),
        (["--tls-min-version=VersionTLS11"], "--tls-min-version VersionTLS11"),
        (["--max-connections=0"], "must be at least 1"),
        (["--tls-cipher-suites=TLS_RSA_WITH_NULL"], "unknown cipher suite(s) TLS_RSA_WITH_NULL"),
    ],
)
def test_bad_input_is_a_clear_error(
    tmp_path: Path, args: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code = cli.main([f"--kubeconfig={kubeconfig(tmp_path)}", *args])
    assert code == 2
    assert message in capsys.readouterr().err


def test_provider_config_must_be_a_mapping(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "p.yaml"
    config.write_text("- just\n- a list\n")
    assert cli.main([f"--kubeconfig={kubeconfig(tmp_path)}", f"--provider-config={config}"]) == 2
    assert "must hold a mapping" in capsys.readouterr().err


def test_invalid_provider_settings_exit_2(tmp_path: Path) -> None:
    config = tmp_path / "p.yaml"
    config.write_text("failure_rate: 5\n")
    code = cli.main(
        [f"--kubeconfig={kubeconfig(tmp_path)}", "--provider=sim", f"--provider-config={config}"]
    )
    assert code == 2


def test_bad_environment_value_is_reported_like_a_bad_flag(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("VKPY_PORT", "abc")
    with pytest.raises(SystemExit) as exited:
        cli.parser().parse_args([])
    assert exited.value.code == 2
    assert "argument --port: invalid int value: 'abc'" in capsys.readouterr().err


def test_tls_flags_as_the_kubelet_takes_them(tmp_path: Path) -> None:
    default = settings(tmp_path).api.tls
    assert default.minimum == ssl.TLSVersion.TLSv1_2
    assert "CBC" not in default.ciphers and "-SHA:" not in default.ciphers + ":"
    chosen = settings(
        tmp_path,
        "--tls-min-version=VersionTLS13",
        "--tls-cipher-suites=TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,TLS_AES_128_GCM_SHA256",
    ).api.tls
    assert chosen.minimum == ssl.TLSVersion.TLSv1_3
    assert chosen.ciphers == "ECDHE-RSA-AES128-GCM-SHA256"


def test_connection_caps_from_flags(tmp_path: Path) -> None:
    assert settings(tmp_path).api.limits.max_connections == 1024
    limits = settings(
        tmp_path, "--max-connections=5000", "--max-connections-per-client=1000"
    ).api.limits
    assert (limits.max_connections, limits.max_connections_per_client) == (5000, 1000)


def test_the_default_state_directory_is_per_node() -> None:
    assert cli.default_state_dir("vk-1") != cli.default_state_dir("vk-2")
    assert cli.default_state_dir("vk-1").endswith("/vk-1")


def test_allowed_unsafe_sysctls_and_the_os_reach_pod_admission(tmp_path: Path) -> None:
    got = settings(
        tmp_path, "--allowed-unsafe-sysctls", "kernel.msg*, net.core.somaxconn", "--os", "linux"
    )
    assert got.pods.allowed_unsafe_sysctls == ("kernel.msg*", "net.core.somaxconn")
    assert got.pods.operating_system == "linux"
    assert settings(tmp_path).pods.allowed_unsafe_sysctls == ()
    with pytest.raises(cli.UsageError, match="not known to be namespaced"):
        settings(tmp_path, "--allowed-unsafe-sysctls", "vm.swappiness")


def test_leader_election_flags(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cli, "SERVICE_ACCOUNT_NAMESPACE", tmp_path / "absent")
    assert settings(tmp_path).election is None
    elected = settings(
        tmp_path,
        "--node-name=vk-9",
        "--leader-elect",
        "--leader-elect-identity=pod-a",
        "--leader-elect-lease-duration=20",
        "--health-port=10248",
    )
    assert elected.election is not None
    assert elected.election.name == "vkpy-vk-9"
    assert elected.election.namespace == "default"  # outside a cluster
    assert elected.election.identity == "pod-a"
    assert (elected.election.lease_duration, elected.election.renew_deadline) == (20, 10)
    assert elected.health_port == 10248
    with pytest.raises(cli.UsageError, match="renew deadline"):
        settings(tmp_path, "--leader-elect", "--leader-elect-renew-deadline=40")


def test_the_leader_lease_is_never_among_the_node_leases(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 27: a leader Lease in kube-node-lease could be a node's heartbeat Lease
    (kube-node-lease/<node>), which the leader itself renews as the node: it deposed
    itself two seconds after it took over. The leader Lease lives elsewhere."""
    elect = ("--node-name=vk-9", "--leader-elect")
    in_cluster = tmp_path / "namespace"
    in_cluster.write_text("vk-system\n")
    monkeypatch.setattr(cli, "SERVICE_ACCOUNT_NAMESPACE", in_cluster)
    elected = settings(tmp_path, *elect).election
    assert elected is not None and elected.namespace == "vk-system"  # the pod's own
    given = settings(tmp_path, *elect, "--leader-elect-resource-namespace=ops").election
    assert given is not None and given.namespace == "ops"
    monkeypatch.setattr(cli, "SERVICE_ACCOUNT_NAMESPACE", tmp_path / "absent")
    outside = settings(tmp_path, *elect).election
    assert outside is not None and outside.namespace == "default"
    for name in ("vk-9", "vkpy-vk-9"):  # the node's own Lease, or any name there
        with pytest.raises(cli.UsageError) as refused:
            settings(
                tmp_path, *elect, "--leader-elect-resource-namespace=kube-node-lease",
                f"--leader-elect-resource-name={name}",
            )  # fmt: skip
        assert str(refused.value) == (
            f"--leader-elect-resource-namespace: the leader Lease kube-node-lease/{name} "
            "must not be in kube-node-lease, where the nodes' heartbeat Leases are (it "
            "could be one of them, renewed by the node): give the leader Lease a "
            "namespace of its own"
        )
    # a node set shared by replicas: the nodes' own Leases are the lock (vkpy.fleet.sharded)
    shared = settings(tmp_path, "--nodes=2", "--leader-elect").election
    assert shared is not None and shared.namespace == "kube-node-lease"
