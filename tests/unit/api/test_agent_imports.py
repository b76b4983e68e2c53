"""What a sim agent loads: no cloud SDK, no generated Kubernetes client, no cryptography.

Each of these stays resident once imported (cryptography's extension alone is about
10 MiB, kubernetes-asyncio's generated client 38 MiB), and RSS is what a user of a
1000-pod node compares with kwok's. The check runs the agent's start-up path in a
fresh interpreter: its imports, the sim backend as `--provider sim` builds it, and
the self-signed serving certificate made and served over TLS.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

NOT_LOADED = ("cryptography", "botocore", "aiobotocore", "azure", "kubernetes_asyncio")

START = """
import json, ssl, sys
from pathlib import Path
import vkpy.app.cli, vkpy.app.runner
from vkpy.api.certs.serving import self_signed_pair
from vkpy.api.certs.tls import ServingTLS
from vkpy.providers import registry

state = Path(sys.argv[1])
registry.create("sim", {}, registry.ProviderContext("n1", str(state), "127.0.0.1"))
pair = self_signed_pair(state / "certs", "n1", ["127.0.0.1"])
tls = ServingTLS(verify_client=True)
tls.serve(pair)
loaded = sorted({m.split(".")[0] for m in sys.modules})
print(json.dumps({"loaded": loaded, "common_name": pair.common_name,
                  "ips": list(pair.ip_addresses)}))
"""


def test_a_sim_agent_starts_without_sdks_or_cryptography(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-c", START, str(tmp_path)], capture_output=True, text=True, check=True
    )
    seen = json.loads(result.stdout)
    assert [name for name in NOT_LOADED if name in seen["loaded"]] == []
    assert seen["common_name"].startswith("n1@")
    assert seen["ips"] == ["127.0.0.1"]
    assert (tmp_path / "certs" / "kubelet.crt").read_bytes().startswith(b"-----BEGIN CERTIFICATE")
