"""What `network: pod` adds to a pod's start and removal, measured without a cluster.

In a network namespace made here (vkpy.devcluster.netns, so the host's network is
never touched), `--pods` times over: start a pod's namespace holder with a network
namespace (namespaces.py), wire it (podnet.connect: the veth pair, addresses and
routes, two `ip -batch` runs), then unwire it and stop the holder, as vkpy does for
each pod. Prints the median and the maximum of each step. Needs root.

    sudo .venv/bin/python bench/pod_network.py --pods 20
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

from vkpy.devcluster.netns import PrivateNetwork
from vkpy.providers.process import namespaces, podnet
from vkpy.providers.process.addresses import AddressPool


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--pods", type=int, default=20)
    options = parser.parse_args()
    steps: dict[str, list[float]] = {"holder": [], "wiring": [], "removal": []}
    with PrivateNetwork(), tempfile.TemporaryDirectory() as scratch:
        pool = AddressPool("10.244.7.0/24")
        for i in range(options.pods):
            pod_dir = Path(scratch) / str(i)
            pod_dir.mkdir()
            uid = f"bench-{i:04d}"
            began = time.perf_counter()
            holder = namespaces.start(pod_dir, ("uts", "ipc", "net"), f"pod-{i}")
            started = time.perf_counter()
            address = pool.allocate(uid, podnet.link_name(uid))
            podnet.connect(holder.pid, address, "bench", uid)
            wired = time.perf_counter()
            podnet.disconnect(address.link)
            namespaces.stop(pod_dir)
            pool.release(uid)
            removed = time.perf_counter()
            steps["holder"].append(started - began)
            steps["wiring"].append(wired - started)
            steps["removal"].append(removed - wired)
    for name, values in steps.items():
        median, worst = statistics.median(values) * 1000, max(values) * 1000
        print(f"{name}: median {median:.0f} ms, max {worst:.0f} ms ({len(values)} pods)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
