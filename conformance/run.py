"""`make conformance`: Kubernetes' own end-to-end specs against a vkpy node.

Builds the pinned `e2e.test` and `ginkgo` (controlplane/tools/e2e) and agnhost
(controlplane/tools/agnhost), then re-runs itself in a network namespace of its own
(`unshare --net`, so it needs root) in which it makes a veth pair holding the node IP
198.18.0.1/32: the API server refuses to proxy to a loopback node address, and
nothing here reaches or disturbs the host's network. Inside it starts the local
control plane (vkpy.devcluster), one vkpy node with the process backend as the only
schedulable node (`--taint none`), and runs the `[NodeConformance]` specs (without
Serial, Disruptive, Slow, Flaky) and the `[sig-cli]` kubectl logs/exec/attach/
port-forward specs with a JUnit report. The suite's images come from the dev
cluster's registry (vkpy/devcluster/registry.py, inside the namespace too): its
`KUBE_TEST_REPO_LIST` names that registry for registry.k8s.io/e2e-test-images and the
other registries of the suite (repo_list), and the node mirrors the public names to
it. The results go into docs/conformance.md (report.py). Everything it starts is
stopped at the end; the namespace goes with it.

    sudo .venv/bin/python conformance/run.py [--procs 4] [--focus REGEX] [--keep DIR]
        [--selection node|cli] [--rerun-failed DIR]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from conformance import results  # noqa: E402
from conformance.report import Selection, read_junit  # noqa: E402
from vkpy.devcluster import DevCluster, find_bin_dir, pinned_release  # noqa: E402
from vkpy.devcluster.binaries import tool_dir  # noqa: E402
from vkpy.devcluster.images.catalogue import E2E_MISSING  # noqa: E402
from vkpy.devcluster.netns import NODE_IP, setup_node_network  # noqa: E402
from vkpy.devcluster.nodes import backend_reads_registries  # noqa: E402
from vkpy.devcluster.service_ip import HTTPS, ServiceRelay  # noqa: E402
from vkpy.providers.process import leftovers  # noqa: E402
from vkpy.providers.process.standins import BUSYBOX_BIN  # noqa: E402

NODE_NAME = "vkpy-conformance"
POD_CIDR = "10.244.0.0/16"
"""Pod addresses (`network: pod`): every pod has a network of its own, so two pods
may listen on one port (the suite's pods use 80 and 8080 over and over, and a
namespace is deleted while the next spec already runs)."""
KUBELET_PORT = 10250
SELECTIONS = (
    Selection("NodeConformance", r"\[NodeConformance\]", "node"),
    Selection(
        "sig-cli logs/exec/attach/port-forward",
        r"\[sig-cli\] Kubectl (logs|exec|Port forwarding|client Simple pod)",
        "cli",
    ),
)
SUITE_KUBECONFIG = "suite.kubeconfig"
#: The images the suite's NodeConformance and kubectl specs pull that are built here.
SUITE_IMAGES = (
    "busybox",
    "pause",
    "agnhost",
    "nginx",
    "nonroot",
    "nonewprivs",
    "glibc-dns-testing",
)
#: KUBE_TEST_REPO_LIST's keys (test/utils/image/manifest.go's RegistryList) for the
#: public registries, and where each is in the local registry (below its host's name).
#: invalidRegistry and privateRegistry keep their defaults: specs expect those to fail
#: or to need credentials.
REPO_LIST_KEYS = {
    "promoterE2eRegistry": "registry.k8s.io/e2e-test-images",
    "buildImageRegistry": "registry.k8s.io/build-image",
    "gcEtcdRegistry": "registry.k8s.io",
    "gcRegistry": "registry.k8s.io",
    "sigStorageRegistry": "registry.k8s.io/sig-storage",
    "dockerLibraryRegistry": "docker.io/library",
    "cloudProviderGcpRegistry": "registry.k8s.io/cloud-provider-gcp",
}


def repo_list(host: str) -> str:
    """The KUBE_TEST_REPO_LIST file: each public registry of the suite at the local
    registry `host`, under the namespace the dev cluster stores its names in."""
    lines = [f"{key}: {host}/{public}" for key, public in REPO_LIST_KEYS.items()]
    return "\n".join(lines) + "\n"


def missing_images_note() -> str:
    return "suite images not built here (their specs fail to pull): " + ", ".join(E2E_MISSING)


SKIP = r"\[Serial\]|\[Disruptive\]|\[Slow\]|\[Flaky\]"


def agnhost_image_files() -> Path:
    """Where the agnhost image's own TLS pair comes from: the image adds
    `test/images/agnhost/porter/localhost.{crt,key}` of the pinned Kubernetes module at
    its root, and the suite's HTTPS hooks serve with `/localhost.crt`."""
    module = subprocess.run(
        ["go", "list", "-m", "-f", "{{.Dir}}", "k8s.io/kubernetes"],
        cwd=ROOT / "controlplane" / "tools" / "agnhost",
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    return Path(module) / "test" / "images" / "agnhost" / "porter"


def provider_config(
    run_dir: Path,
    agnhost: Path,
    image_files: Path,
    relay: ServiceRelay,
    registries: dict[str, object] | None = None,
) -> Path:
    """The process backend's settings for the run: agnhost from the pinned build (a
    copy the containers' user can reach), hostPath under /tmp, privileged pods
    allowed (as a kubelet allows them by default), a network namespace and an
    address per pod, the API server as the `kubernetes` Service (`relay`)."""
    # Not under /tmp: a pod with a filesystem of its own has a private /tmp, so a copy
    # there is out of its sight (the run directory is usually under /tmp).
    bin_dir = Path(tempfile.mkdtemp(prefix=f"vkpy-conformance-{NODE_NAME}-", dir="/var/tmp"))
    bin_dir.chmod(0o755)
    (run_dir / "bin-dir").write_text(str(bin_dir))
    shutil.copy2(agnhost, bin_dir / "agnhost")
    (bin_dir / "agnhost-2").symlink_to("agnhost")  # the image has a second name for it
    for name in ("localhost.crt", "localhost.key"):
        shutil.copyfile(image_files / name, bin_dir / name)
        (bin_dir / name).chmod(0o644)  # a test pair of the suite's, read by any pod user
    settings = {
        "images": {
            "*/agnhost": {
                "entrypoint": ["/agnhost"],
                "cmd": ["pause"],
                "user": 0,  # the image's USER: root
                "path": [str(bin_dir), BUSYBOX_BIN],
                # The image's own files, at their paths in the pods' root.
                "files": {
                    "/agnhost": str(bin_dir / "agnhost"),
                    "/agnhost-2": str(bin_dir / "agnhost"),
                    "/localhost.crt": str(bin_dir / "localhost.crt"),
                    "/localhost.key": str(bin_dir / "localhost.key"),
                },
            },
        },
        # /etc/hosts: the managed-hosts spec mounts the node's file to compare with.
        "host_path_prefixes": ["/tmp", "/etc/hosts"],
        # A kubelet lets pods be privileged (unless --allow-privileged=false) and use the
        # host's network; the suite's hostPath, PrivilegedPod and /etc/hosts specs ask.
        "allow": ["privileged", "hostNetwork"],
        # Host programs (the stand-ins above), what this run is written for; as root the
        # default would be images through runc (modes.py).
        "runtime": "host",
        "network": "pod",
        "pod_cidr": POD_CIDR,
        # The suite's pods ask for runAsUser/fsGroup 1000, 1001 and 10000 (its restricted
        # pod security default is 1000): the pods' ids must include them. 65534 (nobody)
        # stays out: other vkpy nodes of a shared host may run containers as nobody.
        "pod_uid_range": "1000-65533",
        # The `kubernetes` Service at its ClusterIP (service_ip.py relays it to the API
        # server, which listens on loopback: the pods' 127.0.0.1 is their own).
        "kubernetes_service_host": relay.address,
        "kubernetes_service_port": relay.port,
        "pods_dir": str(run_dir / "pods"),
    }
    if registries is not None and backend_reads_registries():
        settings["registries"] = registries  # the dev cluster registry as the mirror
    path = run_dir / "process.json"
    path.write_text(json.dumps(settings, indent=2))
    return path


def oci_provider_config(
    run_dir: Path, relay: ServiceRelay, registries: dict[str, object] | None
) -> Path:
    """The process backend's settings for a run on real images (`runtime: oci`): the
    suite's own images pulled from the dev cluster's registry (its mirrors), each pod
    in a user namespace of its own (so no pod id range to fit the suite's ids into) and
    on a network of its own, hostPath under /tmp and for /etc/hosts, privileged pods
    and the host's network allowed (a kubelet allows both by default), and the API
    server as the `kubernetes` Service (`relay`)."""
    settings: dict[str, object] = {
        "runtime": "oci",
        "host_path_prefixes": ["/tmp", "/etc/hosts"],
        "allow": ["privileged", "hostNetwork"],
        "network": "pod",
        "pod_cidr": POD_CIDR,
        "kubernetes_service_host": relay.address,
        "kubernetes_service_port": relay.port,
        "pods_dir": str(reachable_pods_dir(run_dir)),
    }
    if registries is not None:
        settings["registries"] = registries
    path = run_dir / "process.json"
    path.write_text(json.dumps(settings, indent=2))
    return path


def reachable_pods_dir(run_dir: Path) -> Path:
    """Where the oci node keeps its pods: runc mounts each pod's root as the pod's own
    ids, which must traverse every directory above it, and a run directory may sit
    below a closed one (a home, pytest's 0700 temporary directories). A directory of
    its own in /var/tmp, linked as `pods` in the run directory (where stop_everything
    looks, and what it removes at the end)."""
    pods = Path(tempfile.mkdtemp(prefix=f"vkpy-conformance-{NODE_NAME}-pods-", dir="/var/tmp"))
    pods.chmod(0o711)
    link = run_dir / "pods"
    if link.is_symlink():
        link.unlink()
    link.symlink_to(pods)
    return pods


def backend_key(options: argparse.Namespace) -> str:
    """The results store's name for the run's backend: `process-oci` for the process
    backend on real images, `process` for its host programs (the stand-ins), `sim`."""
    if options.provider == "process" and options.runtime == "oci":
        return "process-oci"
    return str(options.provider)


SIM_SETTINGS = {
    # A container of a pod that does not restart Always is a program that finishes:
    # it exits 0 after this long, so a spec waiting for its pod to succeed sees it
    # succeed (and one that reads what the program wrote sees the sim's own log lines
    # and fails at once) instead of waiting out its framework timeout.
    "finite_run_seconds": 3,
    # Ready after the readiness/startup probe's initial delay, as a kubelet whose first
    # probe succeeds (the readiness-delay specs check that it is not ready before).
    "probe_delays": True,
}


def sim_config(run_dir: Path) -> Path:
    """The sim backend's settings for the run (SIM_SETTINGS)."""
    path = run_dir / "sim.json"
    path.write_text(json.dumps(SIM_SETTINGS, indent=2))
    return path


def node_ready(cluster: DevCluster) -> bool:
    got = cluster.access().run_kubectl("get", "node", NODE_NAME, "-o", "json", check=False)
    if got.returncode != 0:
        return False
    conditions = json.loads(got.stdout).get("status", {}).get("conditions", [])
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


def start_node(
    run_dir: Path, cluster: DevCluster, config: Path, provider: str
) -> subprocess.Popen[bytes]:
    argv = [
        sys.executable,
        "-m",
        "vkpy",
        f"--kubeconfig={cluster.kubeconfig}",
        f"--node-name={NODE_NAME}",
        f"--provider={provider}",
        f"--node-ip={NODE_IP}",
        "--listen-address=0.0.0.0",
        f"--port={KUBELET_PORT}",
        f"--state-dir={run_dir / 'state'}",
        "--taint=none",
        "--log-level=info",
    ]
    argv.append(f"--provider-config={config}")
    log = (run_dir / "vkpy.log").open("ab")
    node = subprocess.Popen(argv, stdout=log, stderr=log, start_new_session=True, cwd=ROOT)
    deadline = time.monotonic() + 120
    while not node_ready(cluster):
        if node.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"vkpy did not become Ready; see {run_dir / 'vkpy.log'}")
        time.sleep(1)
    return node


def failed_locations(run_dir: Path, selection: Selection) -> list[str]:
    """`file:line` of every spec of `selection` that failed in a previous run (its Ginkgo
    JSON reports), for --focus-file."""
    places = []
    for report in sorted(run_dir.glob("report*.json")):
        for suite in json.loads(report.read_text()):
            for spec in suite.get("SpecReports") or []:
                texts = spec.get("ContainerHierarchyTexts") or []
                text = " ".join([*texts, spec.get("LeafNodeText") or ""])
                failed = spec.get("State") not in ("passed", "skipped")
                if spec.get("LeafNodeType") == "It" and failed and selection.chooses(text):
                    where = spec["LeafNodeLocation"]
                    places.append(f"{where['FileName']}:{where['LineNumber']}")
    return places


def ginkgo_argv(
    tools: Path, run_dir: Path, cluster: DevCluster, procs: int, selection: str, timeout: str
) -> list[str]:
    """The suite's command for one selection; `--focus=...` is its second element."""
    return [
        str(tools / "ginkgo"),
        "--focus=.",
        f"--procs={procs}",
        f"--skip={SKIP}",
        f"--timeout={timeout}",
        "--no-color",
        "--silence-skips",
        f"--output-dir={run_dir}",
        f"--junit-report=junit-{selection}.xml",
        f"--json-report=report-{selection}.json",
        str(tools / "e2e.test"),
        "--",
        f"--kubeconfig={run_dir / SUITE_KUBECONFIG}",
        f"--kubectl-path={cluster.kubectl}",
        "--provider=skeleton",
        "--disable-log-dump",
        "--minStartupPods=0",
        "--node-schedulable-timeout=2m",
        f"--report-dir={run_dir / 'e2e'}",
    ]


def suite_runs(options: argparse.Namespace, run_dir: Path, cluster: DevCluster) -> list[list[str]]:
    """One Ginkgo run per selection: the NodeConformance specs with --procs at once, the
    kubectl specs with --cli-procs (one at a time by default: their port-forward
    specs measure what a forwarded connection carries). --focus: one run of what it
    matches; --rerun-failed: each selection's failed specs; --selection: only the
    selections named (each whole, with its own procs: a full run of each)."""
    tools = Path(options.tools)
    if options.focus and not options.rerun_failed:
        argv = ginkgo_argv(tools, run_dir, cluster, options.procs, "focus", options.timeout)
        argv[1] = f"--focus={options.focus}"
        return [argv]
    runs = []
    for selection in SELECTIONS:
        if options.selection and selection.key not in options.selection:
            continue
        procs = options.procs if selection.key == "node" else options.cli_procs
        argv = ginkgo_argv(tools, run_dir, cluster, procs, selection.key, options.timeout)
        argv[1] = f"--focus={options.focus or selection.focus}"
        if options.rerun_failed:
            places = failed_locations(Path(options.rerun_failed), selection)
            if not places:
                continue
            argv[1] = f"--focus={options.focus or '.'}"
            argv[2:2] = [f"--focus-file={place}" for place in places]
        runs.append(argv)
    return runs


def suite_kubeconfig(run_dir: Path, cluster: DevCluster, relay: ServiceRelay) -> None:
    """The suite's kubeconfig: the admin's, at the `kubernetes` Service's address. Not
    loopback, so the specs of kubectl through an HTTP proxy run (proxies are never
    used for loopback addresses, and those specs skip themselves there)."""
    text = cluster.kubeconfig.read_text()
    assert cluster.server in text, "the admin kubeconfig names the API server's URL"
    service = f"https://{relay.address}:{relay.port}"
    (run_dir / SUITE_KUBECONFIG).write_text(text.replace(cluster.server, service))


def stop_everything(cluster: DevCluster, node: subprocess.Popen[bytes] | None, pods: Path) -> None:
    """Delete the suite's pods through the node, stop it, end what is left of them."""
    if node is not None and node.poll() is None:
        cluster.access().run_kubectl(
            "delete", "pods", "--all", "--all-namespaces", "--grace-period=1", "--timeout=120s",
            check=False,
        )  # fmt: skip
        node.send_signal(signal.SIGTERM)
        try:
            node.wait(timeout=60)
        except subprocess.TimeoutExpired:
            node.kill()
    if pods.is_dir():
        # Supervisors and containers (checked by start time, never a reused pid), and
        # in oci runc's containers, sandboxes and mounts.
        leftovers.end_pods(pods)
    cluster.down()
    bin_note = pods.parent / "bin-dir"
    if bin_note.exists():
        shutil.rmtree(bin_note.read_text(), ignore_errors=True)
    if pods.is_symlink():  # oci: reachable_pods_dir's own directory, now unmounted
        shutil.rmtree(pods.resolve(), ignore_errors=True)


def inside(options: argparse.Namespace) -> int:
    setup_node_network(NODE_IP)
    # Pods reach each other through the node's ends of their pairs (this namespace only).
    Path("/proc/sys/net/ipv4/ip_forward").write_text("1\n")
    run_dir = Path(options.run_dir)
    cluster = DevCluster(run_dir / "cluster", bin_dir=Path(options.bin_dir))
    node: subprocess.Popen[bytes] | None = None
    stack = contextlib.ExitStack()
    try:
        cluster.up()
        cluster.start_registry(SUITE_IMAGES)
        host = cluster.extras().registry_host()
        assert host is not None, "start_registry leaves the registry running"
        (run_dir / "repo-list.yaml").write_text(repo_list(host))
        print(f"images from http://{host}; {missing_images_note()}", flush=True)
        relay = stack.enter_context(ServiceRelay(int(cluster.server.rsplit(":", 1)[1]), port=HTTPS))
        suite_kubeconfig(run_dir, cluster, relay)
        if options.provider == "sim":
            config = sim_config(run_dir)
        elif options.runtime == "oci":
            config = oci_provider_config(run_dir, relay, cluster.registries_setting())
        else:
            config = provider_config(
                run_dir,
                Path(options.agnhost),
                Path(options.agnhost_files),
                relay,
                cluster.registries_setting(),
            )
        node = start_node(run_dir, cluster, config, options.provider)
        for argv in suite_runs(options, run_dir, cluster):
            print("running:", shlex.join(argv)[:2000], flush=True)
            began = time.monotonic()
            with (run_dir / "suite.log").open("ab") as log:
                suite = subprocess.run(
                    argv,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    cwd=run_dir,
                    check=False,
                    env={**os.environ, "KUBE_TEST_REPO_LIST": str(run_dir / "repo-list.yaml")},
                )
            minutes = (time.monotonic() - began) / 60
            print(f"suite exit {suite.returncode} after {minutes:.0f} min", flush=True)
    finally:
        stop_everything(cluster, node, run_dir / "pods")
        stack.close()
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--procs", type=int, default=4, help="NodeConformance specs run at once (default 4)"
    )
    parser.add_argument(
        "--cli-procs", type=int, default=1, help="kubectl specs run at once (default 1)"
    )
    parser.add_argument("--focus", default="", help="run only specs matching this regex")
    parser.add_argument(
        "--selection",
        action="append",
        default=[],
        choices=[selection.key for selection in SELECTIONS],
        help="run only this selection, all of it (node: NodeConformance; cli: the kubectl "
        "set, one at a time); repeatable; default: both",
    )
    parser.add_argument(
        "--rerun-failed",
        default="",
        help="a previous run's directory (--keep): run only the specs that failed there",
    )
    parser.add_argument("--timeout", default="3h", help="the whole suite's time limit")
    parser.add_argument("--provider", default="process", choices=("process", "sim"))
    parser.add_argument(
        "--runtime",
        default="oci",
        choices=("oci", "host"),
        help="the process backend's runtime: real images (oci, default) or host programs",
    )
    parser.add_argument(
        "--report",
        default=str(ROOT / "docs" / "conformance.md"),
        help="markdown report to write ('' for none)",
    )
    parser.add_argument(
        "--results",
        default=str(ROOT / "docs" / "conformance-results.json"),
        help="results store the run updates ('' for none)",
    )
    parser.add_argument(
        "--from-run",
        default="",
        help="record a kept run directory's results (with its run.json) without running",
    )
    parser.add_argument(
        "--keep",
        default="",
        help="run directory to use and keep (default: a temporary one, removed)",
    )
    parser.add_argument("--inside", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--run-dir", help=argparse.SUPPRESS)
    parser.add_argument("--tools", help=argparse.SUPPRESS)
    parser.add_argument("--agnhost", help=argparse.SUPPRESS)
    parser.add_argument("--agnhost-files", help=argparse.SUPPRESS)
    parser.add_argument("--bin-dir", help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.inside:
        return inside(options)
    if options.from_run:
        return record_run(options, Path(options.from_run).absolute())
    if os.geteuid() != 0:
        print("conformance/run.py needs root: it makes a network namespace", file=sys.stderr)
        return 1
    tools = tool_dir("e2e")
    agnhost = tool_dir("agnhost") / "agnhost"
    bin_dir = find_bin_dir()
    if options.keep:
        run_dir = Path(options.keep).absolute()
        run_dir.mkdir(parents=True, exist_ok=True)
    else:
        run_dir = Path(tempfile.mkdtemp(prefix="vkpy-conformance-"))
    run_dir.chmod(0o755)  # the containers' user reaches agnhost and the pods under it
    command = (
        "make conformance"
        if os.environ.get("MAKELEVEL")
        else shlex.join(["conformance/run.py", *sys.argv[1:]])
    )
    started = datetime.now(UTC)
    write_run_facts(run_dir, options, started, command)
    child = [
        "unshare", "--net", "--", sys.executable, str(Path(__file__).resolve()), "--inside",
        f"--run-dir={run_dir}", f"--tools={tools}", f"--agnhost={agnhost}", f"--bin-dir={bin_dir}",
        f"--agnhost-files={agnhost_image_files()}",
        f"--procs={options.procs}", f"--cli-procs={options.cli_procs}",
        f"--provider={options.provider}", f"--runtime={options.runtime}",
        f"--focus={options.focus}",
        *[f"--selection={key}" for key in options.selection],
        f"--timeout={options.timeout}",
        f"--rerun-failed={Path(options.rerun_failed).absolute() if options.rerun_failed else ''}",
    ]  # fmt: skip
    print(f"run directory {run_dir}; suite log {run_dir / 'suite.log'}", flush=True)
    result = subprocess.run(child, check=False)
    code = record_run(options, run_dir)
    if code == 0 and not options.keep:
        shutil.rmtree(run_dir, ignore_errors=True)
    return code or result.returncode


def write_run_facts(
    run_dir: Path, options: argparse.Namespace, started: datetime, command: str
) -> None:
    """run.json: what recording the run needs, also later (`--from-run`, whose own
    flags say nothing of the run it records): its backend and kind among them."""
    facts = {
        "started": f"{started:%Y-%m-%d %H:%M}",
        "command": command,
        "commit": commit(),
        "backend": backend_key(options),
        "kind": run_kind(options),
    }
    (run_dir / "run.json").write_text(json.dumps(facts))


def run_kind(options: argparse.Namespace) -> str:
    return "rerun" if options.rerun_failed else "focus" if options.focus else "full"


def commit() -> str:
    got = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    return got.stdout.strip() or "unknown"


def record_run(options: argparse.Namespace, run_dir: Path) -> int:
    """The run's JUnit reports into the results store and the document."""
    junits = sorted(run_dir.glob("junit*.xml"))
    if not junits:
        print(f"no JUnit report: see {run_dir}", file=sys.stderr)
        return 1
    facts = json.loads((run_dir / "run.json").read_text())
    run = results.Run(  # a run.json written before backend and kind were: this command's
        backend=facts.get("backend", backend_key(options)),
        started=facts["started"],
        command=facts["command"],
        release=pinned_release(),
        commit=facts["commit"],
        kind=facts.get("kind", run_kind(options)),
    )
    specs = [spec for junit in junits for spec in read_junit(junit)]
    if options.results:
        store = results.load(Path(options.results))
        counted = results.record(store, specs, SELECTIONS, run)
        results.save(Path(options.results), store)
        print(f"{counted} spec results recorded in {options.results}")
        if options.report:
            print(results.update_document(Path(options.report), store, SELECTIONS))
    return 0


if __name__ == "__main__":
    sys.exit(main())
