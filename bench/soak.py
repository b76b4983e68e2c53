"""One node under steady churn for a long time, with faults at random moments (issue 30).

Not part of `make test`: a benchmark whose figures are a leak's slope and a ledger.
It starts a fresh local control plane and one vkpy node (`--provider sim`,
`start_seconds: 0`, records kept in its state dir, default flags otherwise), then:

- creates `--rate` bound pods a second (32 clients at most in flight), each deleted
  `--lifetime` seconds after its create was accepted, so about rate times lifetime pods
  are alive at any time; a create or delete that fails while the API server is down
  is sent again until it is answered (409 on a create, 404 on a delete: it had been
  done), as a user's controller would;
- at random moments (exponential gaps, `--fault-every` s on average, never closer
  than `--fault-gap`), one fault from the fault suite: the API server SIGKILLed and
  started again after `--outage` s; vkpy SIGKILLed and started again at once; the
  backend failing (vkpy restarted with the sim's `failure_rate` at `--failure-rate`
  for `--backend-fault` s, then again without);
- every `--sample` s it reads vkpy's /metrics: resident memory, open file
  descriptors, asyncio tasks (`vkpy_asyncio_tasks`) and pod records
  (`vkpy_pods`), and plots them (bench/svgplot.py) against time;
- after each fault, how long until every pod alive and created before the fault
  ended is Running (the target: within 30 s);
- at the end it stops creating, lets every pod be deleted, and accounts for each: a
  pod whose create was accepted and that lived 30 s or more outside the faults must
  have been seen Running; every one DELETED, with
  one container start (a second containerID or startedAt, or a restart, means the
  backend ran it twice); the API server must hold none and the sim's platform no
  record.

The slope of each sampled series is fitted by least squares over the samples of the
churn (the drain at the end is another regime: idle connections and tasks go), outside
the faults and the 30 s after each, taken at least `--warmup` s after the vkpy process
that gave them started (a restarted vkpy
starts a new segment with its own intercept: one slope, fitted within segments), and
reported per hour as a share of the series' mean (the target: under 1 %).

With `--system kwok` kwok drives the node under the same load (faults: the API server
and the agent's SIGKILL; kwok has no backend to fail), so a run can tell what the
machine's control plane allows from what vkpy does.

    python bench/soak.py --minutes 60 --rate 100            # the benchmark (a quiet machine)
    python bench/soak.py --minutes 5 --rate 20 --warmup 60 --fault-every 60 --fault-gap 40
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import platform
import random
import re
import statistics
import sys
import tempfile
import time
import urllib.request
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import published
import svgplot
from peers import Kwok, kwok_node, node_ready, rss_mib
from pods import free_port, until

from vkpy.devcluster import DevCluster
from vkpy.kube.client import ApiError, ClientOptions, KubeClient
from vkpy.kube.watch import Watcher, WatchOptions

ROOT = Path(__file__).resolve().parents[1]
NAMESPACE = "soak"
NODE = "soak-node"
SERIES = {
    "RSS MiB": ("process_resident_memory_bytes", 1 / 2**20),
    "open fds": ("process_open_fds", 1.0),
    "asyncio tasks": ("vkpy_asyncio_tasks", 1.0),
    "pod records": ("vkpy_pods", 1.0),
}
FAULTS = ("apiserver", "vkpy", "backend")
RECOVERY = 30.0
"""The target: every pod Running again within this many seconds after a fault."""


def pod(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"bench": "soak"}},
        "spec": {
            "nodeName": NODE,
            "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}],
            "tolerations": [{"operator": "Exists"}],
        },
    }


@dataclass
class Ledger:
    """Every pod of the run, as the load and one watch of the namespace saw it."""

    created: dict[str, float] = field(default_factory=dict)
    deleted: dict[str, float] = field(default_factory=dict)  # DELETE answered
    running: dict[str, float] = field(default_factory=dict)  # first seen Running
    gone: dict[str, float] = field(default_factory=dict)  # DELETED seen
    starts: dict[str, set[str]] = field(default_factory=dict)  # container starts seen
    restarts: Counter[str] = field(default_factory=Counter)
    last_phase: dict[str, tuple[float, str]] = field(default_factory=dict)  # last seen

    def alive(self) -> list[str]:
        return [n for n in self.created if n not in self.deleted and n not in self.gone]

    def replace(self, items: list[dict[str, Any]]) -> None:
        present = {obj.get("metadata", {}).get("name") for obj in items}
        for name in set(self.created) - present - set(self.gone):
            if name in self.running:  # deleted while the watch was down
                self.gone.setdefault(name, time.monotonic())
        for obj in items:
            self.apply("ADDED", obj)

    def apply(self, event_type: str, obj: dict[str, Any]) -> None:
        name = obj.get("metadata", {}).get("name")
        if event_type == "DELETED":
            self.gone.setdefault(name, time.monotonic())
            return
        status = obj.get("status") or {}
        self.last_phase[name] = (time.monotonic(), str(status.get("phase")))
        if status.get("phase") == "Running":
            self.running.setdefault(name, time.monotonic())
        for c in status.get("containerStatuses") or []:
            started = (c.get("state") or {}).get("running", {}).get("startedAt")
            if started:
                self.starts.setdefault(name, set()).add(f"{c.get('containerID')} {started}")
            self.restarts[name] = max(self.restarts[name], int(c.get("restartCount") or 0))


@dataclass
class Sample:
    at: float  # seconds since the run started
    generation: int  # which vkpy process (0, 1, ... after restarts)
    age: float  # seconds since that process started
    values: dict[str, float]
    alive: int


@dataclass
class Fault:
    kind: str
    started: float
    ended: float
    recovered_after: float = float("nan")


class Agent:
    """The vkpy process: started, SIGKILLed, restarted with another sim config."""

    def __init__(self, kubeconfig: Path, workdir: Path) -> None:
        self.kubeconfig = kubeconfig
        self.workdir = workdir
        self.metrics_port = free_port()
        self.port = free_port()
        self.process: asyncio.subprocess.Process | None = None
        self.generation = -1
        self.started = 0.0

    async def start(self, failure_rate: float = 0.0) -> None:
        config = self.workdir / "sim.yaml"
        config.write_text(f"start_seconds: 0\nfailure_rate: {failure_rate}\n")
        log = (self.workdir / "vkpy.log").open("ab")
        self.process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "vkpy",
            f"--kubeconfig={self.kubeconfig}",
            f"--node-name={NODE}",
            "--provider=sim",
            f"--provider-config={config}",
            "--node-ip=127.0.0.1",
            "--listen-address=127.0.0.1",
            f"--port={self.port}",
            f"--metrics-port={self.metrics_port}",
            f"--state-dir={self.workdir / 'state'}",
            stdout=log,
            stderr=log,
        )
        self.generation += 1
        self.started = time.monotonic()

    async def kill(self) -> None:
        if self.process is not None and self.process.returncode is None:
            self.process.kill()
            await self.process.wait()

    async def stop(self) -> None:
        if self.process is not None and self.process.returncode is None:
            self.process.terminate()
            try:
                await asyncio.wait_for(self.process.wait(), 30)
            except TimeoutError:
                await self.kill()

    def backend_records(self) -> int:
        """Pods the sim's platform still holds (its record files)."""
        folder = self.workdir / "state" / "sim"
        return len(list(folder.glob("*.json"))) if folder.exists() else 0

    def metrics(self) -> dict[str, float]:
        url = f"http://127.0.0.1:{self.metrics_port}/metrics"
        with urllib.request.urlopen(url, timeout=5) as got:
            text = got.read().decode()
        out: dict[str, float] = {}
        for label, (metric, scale) in SERIES.items():
            found = re.search(rf"^{metric} (\S+)$", text, re.M)
            if found:
                out[label] = float(found.group(1)) * scale
        return out


class KwokAgent(Agent):
    """kwok driving the soak's node instead of vkpy (`--system kwok`): the same load on
    the same machine, to tell what the control plane allows from what vkpy does. kwok
    has no backend to fail and no such metrics: RSS and open fds come from /proc."""

    def __init__(self, kubeconfig: Path, workdir: Path, args: argparse.Namespace) -> None:
        super().__init__(kubeconfig, workdir)
        self.kwok = Kwok(kubeconfig, workdir, args)

    async def start(self, failure_rate: float = 0.0) -> None:
        if self.generation < 0:  # kwok drives a Node object someone else made
            client = await KubeClient.connect(ClientOptions(kubeconfig=str(self.kubeconfig)))
            try:
                await client.create("/api/v1/nodes", kwok_node(NODE))
            finally:
                await client.close()
        log = (self.workdir / "kwok.log").open("ab")
        self.process = await asyncio.create_subprocess_exec(
            *self.kwok.argv(NODE), stdout=log, stderr=log
        )
        self.generation += 1
        self.started = time.monotonic()

    def backend_records(self) -> int:
        return 0

    def metrics(self) -> dict[str, float]:
        if self.process is None or self.process.returncode is not None:
            raise OSError("kwok is not running")
        pid = self.process.pid
        return {"RSS MiB": rss_mib(pid), "open fds": float(len(os.listdir(f"/proc/{pid}/fd")))}


async def answered(call: Any, *, done_if: str) -> None:
    """`call()` until the API server answers it; `done_if` ("conflict" or "not_found")
    is an answer that says an earlier try had done it."""
    while True:
        try:
            await call()
            return
        except ApiError as error:
            if getattr(error, done_if):
                return
            if error.status in (400, 422):  # the request itself is wrong: never retried
                raise
        await asyncio.sleep(1.0)


class Soak:
    def __init__(self, args: argparse.Namespace, cluster: DevCluster, workdir: Path) -> None:
        self.args = args
        self.cluster = cluster
        self.agent = (
            KwokAgent(cluster.kubeconfig, workdir, args)
            if args.system == "kwok"
            else Agent(cluster.kubeconfig, workdir)
        )
        self.ledger = Ledger()
        self.samples: list[Sample] = []
        self.faults: list[Fault] = []
        self.t0 = time.monotonic()
        self.random = random.Random(args.seed)
        self.recoveries: list[asyncio.Task[None]] = []
        self.scheduled = 0  # pods the rate has asked for so far

    def now(self) -> float:
        return time.monotonic() - self.t0

    async def one_pod(self, client: KubeClient, gate: asyncio.Semaphore, name: str) -> None:
        path = f"/api/v1/namespaces/{NAMESPACE}/pods"
        async with gate:
            await answered(lambda: client.create(path, pod(name), decode=False), done_if="conflict")
        self.ledger.created[name] = time.monotonic()
        await asyncio.sleep(self.args.lifetime)
        async with gate:
            await answered(
                lambda: client.delete(f"{path}/{name}", decode=False), done_if="not_found"
            )
        self.ledger.deleted[name] = time.monotonic()

    async def load(self, client: KubeClient, until_t: float) -> None:
        gate = asyncio.Semaphore(32)
        tasks: set[asyncio.Task[None]] = set()
        n = 0
        tick = 0.1
        next_t = time.monotonic()
        while self.now() < until_t:
            due = int((self.now()) * self.args.rate) - n
            for _ in range(max(0, due)):
                task = asyncio.create_task(self.one_pod(client, gate, f"s{n:07d}"))
                tasks.add(task)
                task.add_done_callback(tasks.discard)
                n += 1
            self.scheduled = n
            next_t += tick
            await asyncio.sleep(max(0.0, next_t - time.monotonic()))
        if tasks:
            await asyncio.gather(*tasks)

    async def sampler(self) -> None:
        while True:
            try:
                values = await asyncio.to_thread(self.agent.metrics)
            except OSError:
                values = {}
            if values:
                self.samples.append(
                    Sample(
                        self.now(),
                        self.agent.generation,
                        time.monotonic() - self.agent.started,
                        values,
                        len(self.ledger.alive()),
                    )
                )
            if len(self.samples) % max(1, round(60 / self.args.sample)) == 1:
                self.progress(values)
            await asyncio.sleep(self.args.sample)

    def progress(self, values: dict[str, float]) -> None:
        """A line a minute: whether the load keeps up with its rate, and the agent."""
        led = self.ledger
        print(
            f"{self.now():7.1f} s: {len(led.created)} of {self.scheduled} pods created, "
            f"{len(led.alive())} alive, {len(led.running)} seen Running, "
            f"{len(led.gone)} DELETED; {self.args.system} "
            + ", ".join(f"{label} {value:.0f}" for label, value in values.items()),
            file=sys.stderr,
            flush=True,
        )

    async def fault_loop(self, until_t: float) -> None:
        kinds = self.args.faults
        while True:
            gap = max(self.args.fault_gap, self.random.expovariate(1 / self.args.fault_every))
            if self.now() + gap > until_t - self.args.fault_gap:
                return
            await asyncio.sleep(gap)
            kind = self.random.choice(kinds)
            fault = Fault(kind, self.now(), float("nan"))
            print(f"{fault.started:7.1f} s: fault {kind}", file=sys.stderr, flush=True)
            if kind == "apiserver":
                await asyncio.to_thread(self.cluster.kill_component, "kube-apiserver")
                await asyncio.sleep(self.args.outage)
                await asyncio.to_thread(self.cluster.restart_component, "kube-apiserver")
            elif kind == "vkpy":
                await self.agent.kill()
                await self.agent.start()
            else:
                await self.agent.stop()
                await self.agent.start(self.args.failure_rate)
                await asyncio.sleep(self.args.backend_fault)
                await self.agent.stop()
                await self.agent.start()
            fault.ended = self.now()
            self.faults.append(fault)
            self.recoveries.append(asyncio.create_task(self.recovery(fault)))

    async def recovery(self, fault: Fault) -> None:
        """Seconds from the fault's end until every pod alive and created before then is
        Running."""
        cutoff = self.t0 + fault.ended
        limit = time.monotonic() + 300
        while time.monotonic() < limit:
            waiting = [
                n
                for n in self.ledger.alive()
                if self.ledger.created[n] <= cutoff and n not in self.ledger.running
            ]
            if not waiting:
                fault.recovered_after = self.now() - fault.ended
                return
            await asyncio.sleep(0.5)

    async def run(self) -> dict[str, Any]:
        client = await KubeClient.connect(ClientOptions(kubeconfig=str(self.cluster.kubeconfig)))
        watcher = Watcher(
            client, WatchOptions(path=f"/api/v1/namespaces/{NAMESPACE}/pods"), self.ledger
        )
        tasks: list[asyncio.Task[None]] = []
        try:
            await client.create("/api/v1/namespaces", {"metadata": {"name": NAMESPACE}})
            await until(
                "default ServiceAccount",
                lambda: _exists(client, f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts/default"),
                60,
            )
            await self.agent.start()
            await until("node Ready", lambda: node_ready(client, NODE), 120)
            tasks.append(asyncio.create_task(watcher.run()))
            await watcher.synced.wait()
            self.t0 = time.monotonic()
            tasks.append(asyncio.create_task(self.sampler()))
            length = self.args.minutes * 60
            faults = asyncio.create_task(self.fault_loop(length))
            await self.load(client, length)  # every pod created and deleted
            await faults
            await asyncio.gather(*self.recoveries)
            ending = time.monotonic()
            with contextlib.suppress(TimeoutError):
                await until(
                    "every pod DELETED",
                    lambda: _true(all(n in self.ledger.gone for n in self.ledger.created)),
                    self.args.timeout,
                    1.0,
                )
            drain = time.monotonic() - ending
            left = await client.get(f"/api/v1/namespaces/{NAMESPACE}/pods")
            await asyncio.sleep(self.args.sample + 1)  # one more sample: records at rest
            return self.accounts(len(left.get("items") or []), drain)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await self.agent.stop()
            await client.close()

    def calm_stretch(self, name: str) -> float:
        """The longest part of the pod's life (create answered to DELETE answered) that
        no fault overlaps, in seconds."""
        start = self.ledger.created[name] - self.t0
        end = self.ledger.deleted.get(name, time.monotonic()) - self.t0
        longest = 0.0
        for fault in sorted(self.faults, key=lambda f: f.started):
            if fault.ended <= start or fault.started >= end:
                continue
            longest = max(longest, fault.started - start)
            start = max(start, fault.ended)
        return max(longest, end - start)

    def accounts(self, left_in_api: int, drain: float) -> dict[str, Any]:
        led = self.ledger
        not_running = [n for n in led.created if n not in led.running]
        # a pod may never run if every stretch of its life outside the faults is shorter
        # than the RECOVERY the target allows after each
        never_running = [n for n in not_running if self.calm_stretch(n) >= RECOVERY]
        never_gone = [n for n in led.created if n not in led.gone]
        twice = [n for n in led.created if len(led.starts.get(n, ())) > 1 or led.restarts[n]]
        return {
            "pods created": len(led.created),
            f"never seen Running though alive {RECOVERY:g} s or more (lost)": len(never_running),
            f"deleted before Running, alive under {RECOVERY:g} s outside faults": len(not_running)
            - len(never_running),
            "never seen DELETED": len(never_gone),
            "run twice (duplicated)": len(twice),
            "left in the API server": left_in_api,
            "left in the backend": self.agent.backend_records(),
            "seconds to drain at the end": round(drain, 1),
            "examples": [self.story(n) for n in (never_running + never_gone + twice)[:5]],
        }

    def story(self, name: str) -> str:
        """What the ledger knows of one pod, in seconds since the start."""
        led = self.ledger
        seen = led.last_phase.get(name)
        parts = [f"{name}: created {led.created[name] - self.t0:.0f}"]
        if seen:
            parts.append(f"last seen {seen[1]} at {seen[0] - self.t0:.0f}")
        if name in led.deleted:
            parts.append(f"DELETE answered {led.deleted[name] - self.t0:.0f}")
        if name in led.gone:
            parts.append(f"DELETED {led.gone[name] - self.t0:.0f}")
        return ", ".join(parts)


async def _exists(client: KubeClient, path: str) -> bool:
    try:
        await client.get(path)
    except ApiError:
        return False
    return True


async def _true(value: bool) -> bool:
    return value


def slope(
    samples: list[Sample],
    label: str,
    warmup: float,
    until: float = float("inf"),
    faults: list[Fault] | None = None,
) -> tuple[float, float, int]:
    """(slope per hour, mean, samples used): least squares within vkpy processes, over
    the samples taken `until` s at most (the churn's, not the drain's at the end) and
    outside the `faults` and the RECOVERY s after each (an API server outage closes
    the agent's connections for a while: not a trend)."""

    def steady(at: float) -> bool:
        return not any(f.started - 1 <= at <= f.ended + RECOVERY for f in faults or ())

    groups: dict[int, list[tuple[float, float]]] = {}
    for s in samples:
        if s.age >= warmup and s.at <= until and steady(s.at) and label in s.values:
            groups.setdefault(s.generation, []).append((s.at, s.values[label]))
    sxy = sxx = 0.0
    values: list[float] = []
    for points in groups.values():
        if len(points) < 2:
            continue
        mx = statistics.fmean(x for x, _ in points)
        my = statistics.fmean(y for _, y in points)
        sxy += sum((x - mx) * (y - my) for x, y in points)
        sxx += sum((x - mx) ** 2 for x, _ in points)
        values += [y for _, y in points]
    if not sxx or not values:
        return float("nan"), float("nan"), len(values)
    return sxy / sxx * 3600, statistics.fmean(values), len(values)


def report(soak: Soak, accounts: dict[str, Any], args: argparse.Namespace, plots: Path) -> str:
    rows = ["| series | mean | fitted slope per hour | share of the mean per hour | samples |"]
    rows.append("|---|---|---|---|---|")
    for label in SERIES:
        per_hour, mean, used = slope(
            soak.samples, label, args.warmup, args.minutes * 60, soak.faults
        )
        share = per_hour / mean * 100 if mean else float("nan")
        rows.append(f"| {label} | {mean:.1f} | {per_hour:+.2f} | {share:+.2f} % | {used} |")
    faults = [
        f"| {f.started:.0f} | {f.kind} | {f.ended - f.started:.1f} | {f.recovered_after:.1f} |"
        for f in soak.faults
    ]
    ledger = "\n".join(f"| {k} | {v} |" for k, v in accounts.items())
    command = (
        f"python bench/soak.py --minutes {args.minutes:g} --rate {args.rate:g} "
        f"--lifetime {args.lifetime:g} --fault-every {args.fault_every:g} "
        f"--fault-gap {args.fault_gap:g} --warmup {args.warmup:g} --seed {args.seed}"
        + (f" --system {args.system}" if args.system != "vkpy" else "")
    )
    plots.mkdir(parents=True, exist_ok=True)
    (plots / "soak-samples.csv").write_text(
        "seconds,vkpy_process,process_age_seconds,pods_alive,"
        + ",".join(SERIES)
        + "\n"
        + "".join(
            f"{s.at:.1f},{s.generation},{s.age:.1f},{s.alive},"
            + ",".join(f"{s.values.get(label, float('nan')):.2f}" for label in SERIES)
            + "\n"
            for s in soak.samples
        )
    )
    written = svgplot.write(
        plots,
        "soak",
        {
            label: [(s.at / 60, s.values[label]) for s in soak.samples if label in s.values]
            for label in ("RSS MiB", "open fds", "asyncio tasks")
        },
        "minutes",
        "value",
    )
    svgplot.write(
        plots,
        "soak-pods",
        {
            "pod records (vkpy_pods)": [
                (s.at / 60, s.values.get("pod records", 0)) for s in soak.samples
            ],
            "pods alive (the load's ledger)": [(s.at / 60, s.alive) for s in soak.samples],
        },
        "minutes",
        "pods",
    )
    return (
        f"### Soak: one node, churn and faults ({datetime.now(UTC):%Y-%m-%d %H:%M} UTC, "
        f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
        f"load average at the end {' '.join(f'{x:.1f}' for x in os.getloadavg())})\n\n"
        f"`{command}`: {args.rate:g} pods/s created and each deleted {args.lifetime:g} s "
        f"later for {args.minutes:g} min on a fresh control plane; samples every "
        f"{args.sample:g} s; slopes fitted over the samples of the churn (not the drain's "
        f"after it), outside the faults and the {RECOVERY:g} s after each, taken "
        f"{args.warmup:g} s or more after their vkpy process started. "
        f"Plots: {', '.join(p.name for p in written)}, soak-pods.svg; the samples: "
        "soak-samples.csv.\n\n" + "\n".join(rows) + "\n\n"
        "| fault at s | kind | lasted s | all pods Running again after s |\n|---|---|---|---|\n"
        + ("\n".join(faults) or "| — | none | | |")
        + "\n\n| ledger | |\n|---|---|\n"
        + ledger
        + "\n"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=60)
    parser.add_argument("--rate", type=float, default=100, help="pods created per second")
    parser.add_argument("--lifetime", type=float, default=60, help="s from create to delete")
    parser.add_argument("--sample", type=float, default=10, help="s between samples")
    parser.add_argument("--warmup", type=float, default=600, help="s before a fit's samples")
    parser.add_argument("--fault-every", type=float, default=300, help="mean s between faults")
    parser.add_argument("--fault-gap", type=float, default=120, help="least s between faults")
    parser.add_argument("--faults", nargs="+", default=list(FAULTS), choices=FAULTS)
    parser.add_argument("--outage", type=float, default=5, help="s the API server stays down")
    parser.add_argument("--backend-fault", type=float, default=30, help="s of backend failures")
    parser.add_argument("--failure-rate", type=float, default=0.3)
    parser.add_argument("--timeout", type=float, default=300, help="s to drain at the end")
    parser.add_argument("--seed", type=int, default=30)
    parser.add_argument(
        "--system",
        default="vkpy",
        choices=["vkpy", "kwok"],
        help="the agent driving the node (kwok: no backend to fail, no vkpy metrics)",
    )
    parser.add_argument("--plots", type=Path, default=ROOT / "docs" / "plots")
    published.add_options(parser)
    args = parser.parse_args()
    if args.system == "kwok" and "backend" in args.faults:
        parser.error("kwok has no backend to fail: --faults apiserver vkpy (vkpy: the agent)")
    with tempfile.TemporaryDirectory(prefix="vkpy-soak-") as tmp:
        workdir = Path(tmp)
        cluster = DevCluster(workdir / "cluster")
        cluster.up()
        try:
            soak = Soak(args, cluster, workdir)
            accounts = asyncio.run(soak.run())
        finally:
            cluster.down(purge=True)
        text = report(soak, accounts, args, args.plots)
    print(text)
    published.append(text, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
