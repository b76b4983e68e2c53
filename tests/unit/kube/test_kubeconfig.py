"""The kubeconfig is read once, by the API client's loader (issue 11, defect 9).

vkpy used to read it in three places with two rules: the node's address came from
the first cluster in the file (ignoring --context and current-context) and a
KUBECONFIG holding a path list failed. Now the node address, the API server and the
cluster CA all come from the configuration kubernetes-asyncio loaded.
"""

from __future__ import annotations

import base64
from pathlib import Path

import pytest
import yaml

from vkpy.app import cli
from vkpy.app.runner import with_node_address
from vkpy.devcluster import CertificateAuthority
from vkpy.kube.client import ClientOptions, KubeClient
from vkpy.kube.node_address import node_address_towards

DECOY_CA = CertificateAuthority.create("decoy").cert_pem
REAL_CA = CertificateAuthority.create("real").cert_pem


def cluster(name: str, server: str, ca: bytes) -> dict[str, object]:
    data = base64.b64encode(ca).decode()
    return {"name": name, "cluster": {"server": server, "certificate-authority-data": data}}


def context(name: str) -> dict[str, object]:
    return {"name": name, "context": {"cluster": name, "user": "u"}}


def write(path: Path, **config: object) -> Path:
    body = {"apiVersion": "v1", "kind": "Config", "users": [{"name": "u", "user": {"token": "t"}}]}
    path.write_text(yaml.safe_dump({**body, **config}))
    return path


@pytest.fixture
def two_clusters(tmp_path: Path) -> Path:
    """The decoy first, the current context on the second cluster."""
    return write(
        tmp_path / "config",
        clusters=[
            cluster("decoy", "https://[::1]:6443", DECOY_CA),
            cluster("real", "https://127.0.0.1:6443", REAL_CA),
        ],
        contexts=[context("decoy"), context("real")],
        **{"current-context": "real"},
    )


async def connect(kubeconfig: str, context: str | None = None) -> tuple[str, bytes | None]:
    client = await KubeClient.connect(ClientOptions(kubeconfig=kubeconfig, context=context))
    try:
        return client.host, client.cluster_ca()
    finally:
        await client.close()


async def test_current_context_on_the_second_cluster(two_clusters: Path) -> None:
    host, ca = await connect(str(two_clusters))
    assert (host, ca) == ("https://127.0.0.1:6443", REAL_CA)
    assert node_address_towards(host) == "127.0.0.1"


async def test_context_flag_chooses_the_cluster(two_clusters: Path) -> None:
    host, ca = await connect(str(two_clusters), context="decoy")
    assert (host, ca) == ("https://[::1]:6443", DECOY_CA)
    assert node_address_towards(host) == "::1"


async def test_a_kubeconfig_path_list(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first = write(
        tmp_path / "a", clusters=[cluster("decoy", "https://[::1]:1", DECOY_CA)], contexts=[]
    )
    second = write(
        tmp_path / "b",
        clusters=[cluster("real", "https://127.0.0.1:6443", REAL_CA)],
        contexts=[context("real")],
        **{"current-context": "real"},
    )
    monkeypatch.setenv("KUBECONFIG", f"{first}:{second}")
    args = cli.parser().parse_args(["--provider=sim"])
    settings = cli.settings_from_args(args)
    assert settings.kube.kubeconfig == f"{first}:{second}"
    host, ca = await connect(str(settings.kube.kubeconfig))
    assert (host, ca) == ("https://127.0.0.1:6443", REAL_CA)
    resolved = with_node_address(settings, host)
    assert resolved.node.internal_ip == "127.0.0.1"
    assert resolved.pods.host_ip == "127.0.0.1"


def test_a_path_list_with_no_existing_file_is_a_clear_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = cli.main([f"--kubeconfig={tmp_path}/a:{tmp_path}/b"])
    assert code == 2
    assert "no such file" in capsys.readouterr().err


def test_an_explicit_node_ip_is_kept(two_clusters: Path) -> None:
    args = cli.parser().parse_args([f"--kubeconfig={two_clusters}", "--node-ip=10.1.2.3"])
    settings = with_node_address(cli.settings_from_args(args), "https://[::1]:6443")
    assert settings.node.internal_ip == "10.1.2.3"
    assert settings.pods.host_ip == "10.1.2.3"
