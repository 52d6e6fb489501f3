"""The long fault soak: two served models under load while their parts fail, alone and in pairs.

Method. A local cluster (kvant_dev) runs SeaweedFS (S3), its own Prometheus (scraping the pods; the
models' protection reads it) and the operator beside it (bench/soak/stage.py). Two simulator models
serve: `alpha` (converted to INT4 by a Job, FP8 KV with unit scales, two replicas behind two smg
routers) and `beta` (fetched from s3://, bf16, one replica). Each load window sends a bounded
closed-loop load to both Services (3 clients each, 32-token prompts, 16 new tokens, `--window` (10)
seconds, every request bounded at 30 s; bench/soak/load.py), and injects the window's faults
(bench/soak/catalog.py, actions in kvant_dev.faults) at moments drawn from the seed: first every
fault alone in a drawn order (`--rounds` passes), then `--pairs` drawn pairs, the second fault
0.5-4 s after the first.

Faults: SIGKILL the operator (started again at once); SIGKILL one of alpha's gate or engine
containers (the node agent restarts it); delete one of alpha's router pods; SIGKILL kube-apiserver
or etcd (started again with the same data); stop Prometheus for 8-15 s; SIGKILL SeaweedFS for
5-10 s while a new s3:// model's fetch is caught mid-file (throttled to 1 MiB/s through a proxy);
SIGKILL the node agent and start it again; fill the artifacts volume (a 256 MiB tmpfs) as a new
model's conversion Job starts, and free it once the conversion has failed (at most 60 s); drain the
node that holds one of alpha's replicas and none of beta's (cordon, evictions through the PDBs,
uncordon once its pods left); lose that node (it stops reporting, kvant_dev.nodeagent.node_faults:
Kubernetes marks it after 20 s and evicts its pods after the models' lostNodeSeconds, 10 s; the
node comes back once they are evicted). The cluster has two nodes, and the models' pods spread over
them by default.

After each window, the invariants (bench/soak/checks.py), each a violation in the table:
- every request ended 200 or a documented 429/503/408; others are lost. Lost may be: none to a
  "control" fault; at most one per client of alpha to a fault that kills a process carrying its
  requests; any sent before the models were whole again to the node agent's restart, which takes
  every replica down (see below), or to a node's loss (its router's address stays in the Service
until the node is marked); none, for any fault, among requests sent after the models were
  whole again; and no request may hang past its 30 s bound;
- every model whole again (QuantizedModel Ready for its generation, every engine and router pod
  Ready, each router listing every engine, the fault's own part: the killed container started
  again, CacheProtected True again, the fetched or converted model Ready) within the fault's bound
  (90 s, or 150 s for the node agent, a lost node, the store and the full volume), timed from the fault's
  lifting: the kill itself for a crash (the supervisor's restart is recovery), the restart of a
  stopped server, the freeing of the volume;
- no Job created twice for one attempt; no artifact or source folder published twice or partly
  (every manifest checked file by file with sha256, and not rewritten later; every record names a
  published folder of its digest);
- the engines' retractions no more than spec.protection.maxRetractionsPerMinute (0) per minute;
- at the end, every model deleted and nothing left behind (owned objects; staging folders, partial
  downloads or the filler on the volume; the records stay, as designed);
- the operator's RSS (VmRSS, sampled after every window): start, end and max, and a violation if
  one operator process grew more than 25% over its first sample.

It prints one table and exits 1 on any violation.

A window whose models are not whole again within the bound stops the soak's faults: the later ones
would measure it. Their rows say "not run", as do those the time budget (`--minutes`) leaves out.

Stand-ins and what is not done:
- the engine is the simulator (`kvant sim`), not SGLang: the faults hit Kvant's gate, router,
  operator and Jobs, not a real engine's recovery time or memory;
- the node agent is the local kubelet stand-in, and restarting it is harsher than restarting a
  kubelet: it cannot adopt its running containers, and it runs both nodes, so every pod's
  containers die with it and start again (a reboot of every node, for the pods). The soak's first
  runs found the new agent giving pods new IPs, whose status updates the apiserver then refused (422,
  two IPv4 addresses in `status.podIPs`): the agent keeps a pod's IP since. Alpha's 404s after it
  went with the routers' readiness on smg's /readiness (#40), and the fault's last failure was the
  soak's own: its check waited for a finished Job pod to start again (bench/README.md);
- the loads are closed-loop (the issue asks for open-loop): a client has one request out, so what a
  fault may cost is bounded per client;
- memory is the operator's only (not the gates' or routers'), over minutes, not hours;
- the operator runs as one process beside the cluster, not as the chart's two replicas with leader
  election: "kill the leading replica" is a kill of the only one (the chart's two replicas, with
  their leader killed, are e2e/test_helm_install_operator_serves.py's);
- the volume fills as the conversion Job starts, not in the middle of writing a shard: the tiny
  conversion takes about a second once its pod runs, too short to aim inside it. The converter then
  fails on its first write, with ENOSPC.

    python bench/soak/run.py [--seed 32] [--rounds 1] [--pairs 2] [--window 10] [--minutes 12]
                             [--clients 3] [--skip node-agent,node-loss]
"""

from __future__ import annotations

import argparse
import datetime
import math
import random
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

# Run by path, the bench has its own folder on sys.path, not the repository root.
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from bench.soak.catalog import BOUND, Fault, Hit, schedule
from bench.soak.checks import ArtifactLedger, JobLedger, RetractionLedger, leftovers, missing, pods
from bench.soak.load import Window, start_load
from bench.soak.report import Row, count, memory_row, table
from bench.soak.stage import (
    ALPHA,
    MAX_RETRACTIONS_PER_MINUTE,
    NS,
    SERVED,
    Scene,
    apply_model,
    model_manifest,
    soak_scene,
)
from e2e.capacity import TINY_BYTES_PER_TOKEN
from e2e.qm import API_DOWN, service_url

from kvant_dev.loadgen import LoadShape

SETUP_BOUND = 480.0  # seconds for both models to be whole from their apply: a conversion, a fetch, rollouts
DELETE_BOUND = 120.0  # seconds for the deleted models' objects to be gone
TEARDOWN = 60.0  # seconds kept for deleting the models at the end
REPO = Path(__file__).resolve().parents[2]


@dataclass
class Ledgers:
    jobs: JobLedger = field(default_factory=JobLedger)
    artifacts: ArtifactLedger = field(default_factory=ArtifactLedger)
    retractions: RetractionLedger = field(default_factory=RetractionLedger)
    rss: list[tuple[int, float]] = field(default_factory=list)  # (operator start, MiB), after each window

    def check(self, scene: Scene, row: Row) -> None:
        try:
            row.violations += self.jobs.check(scene) + self.artifacts.check(scene)
            self.rss.append((scene.operator.starts, scene.operator.rss_mib()))
        except (*API_DOWN, RuntimeError) as err:
            row.violations.append(f"could not check: {err!r}")


def log(message: str) -> None:
    print(f"[soak {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def shape(name: str, seconds: float, clients: int) -> LoadShape:
    return LoadShape(
        clients=clients,
        seconds=seconds,
        prompt_tokens=32,
        new_tokens=16,
        slo_seconds=30,
        bytes_per_token=TINY_BYTES_PER_TOKEN,
        model=name if name == ALPHA.name else "",  # smg routes /generate by model name
    )


def wait_whole(scene: Scene, hits: list[Hit], deadline: float) -> tuple[float | None, str]:
    """The moment every served model (and each fault's own part) is back, or None at `deadline` with
    what was still missing at the last look."""
    gap = "never looked"
    while time.monotonic() < deadline:
        try:
            listing = pods(scene)
            gaps = [g for g in (missing(scene, s, listing) for s in SERVED) if g]
            gaps += [f"{h.target} not back" for h in hits if not h.back(listing, h)]
            if not gaps:
                return time.monotonic(), ""
            gap = "; ".join(gaps)
        except API_DOWN as err:
            gap = f"the API did not answer: {err!r}"
        time.sleep(0.5)
    return None, gap


def setup(scene: Scene, ledgers: Ledgers, args: argparse.Namespace) -> Row:
    row = Row("setup: apply both models", target="alpha (convert), beta (fetch)", bound=SETUP_BOUND)
    prometheus = scene.cluster.prometheus
    assert prometheus is not None
    applied = time.monotonic()
    for served in SERVED:
        apply_model(scene, model_manifest(served, prometheus.url))
    whole_at, gap = wait_whole(scene, [], applied + SETUP_BOUND)
    if whole_at is None:
        row.violations.append(f"not whole within {SETUP_BOUND:.0f} s: {gap}")
        return row
    row.ready_seconds = whole_at - applied
    ledgers.retractions.read(scene, SERVED)
    urls = {s.name: (service_url(scene.cluster, NS, s.name), shape(s.name, 3, args.clients)) for s in SERVED}
    thread, windows = start_load(urls)
    thread.join()
    count(row, windows)
    if row.non_200:
        row.violations.append("warm-up: not every request answered 200")
    ledgers.check(scene, row)
    return row


def window(
    scene: Scene,
    faults: tuple[Fault, ...],
    rng: random.Random,
    ledgers: Ledgers,
    args: argparse.Namespace,
    *,
    pool: ThreadPoolExecutor,
) -> Row:
    """One load window with its faults injected, and the invariants after it. The faults run on
    `pool`, whose threads live as long as the soak: a process the local cluster starts dies with the
    thread that started it (kvant_dev.process: setpriv's parent-death signal is per thread), so a
    restart made from a short-lived thread would be killed again as soon as that thread ended."""
    row = Row(" + ".join(f.name for f in faults), bound=max(f.bound for f in faults))
    try:
        run_window(row, scene, faults, rng, ledgers, args=args, pool=pool)
    except Exception as err:  # the soak's own failure (or a cluster left broken): in the table
        row.violations.append(f"soak error: {err!r}"[:300])
    return row


def run_window(
    row: Row,
    scene: Scene,
    faults: tuple[Fault, ...],
    rng: random.Random,
    ledgers: Ledgers,
    *,
    args: argparse.Namespace,
    pool: ThreadPoolExecutor,
) -> None:
    armed: dict[str, Hit] = {}
    for fault in sorted(faults, key=lambda f: f.arm_last):
        try:
            armed[fault.name] = fault.arm(scene, rng)
        except Exception as err:  # not armed: the soak's own failure, shown as such
            row.violations.append(f"{fault.name} not armed: {err!r}")
            return
    hits = [armed[f.name] for f in faults]
    row.target = " + ".join(h.target for h in hits)
    moments = [round(rng.uniform(1.0, 4.0), 1)]
    if len(hits) > 1:
        moments.append(round(moments[0] + rng.uniform(0.5, 4.0), 1))
    row.at = " / ".join(f"{m:.1f}" for m in moments)
    ledgers.retractions.read(scene, SERVED)
    urls = {
        s.name: (service_url(scene.cluster, NS, s.name), shape(s.name, args.window, args.clients))
        for s in SERVED
    }
    load, windows = start_load(urls)
    started = time.monotonic()
    injections = []
    for hit, moment in zip(hits, moments, strict=True):
        time.sleep(max(0.0, started + moment - time.monotonic()))
        injections.append(pool.submit(hit.run))
    for injection in injections:
        injection.result(timeout=300)
    lifted = max(h.lifted or time.monotonic() for h in hits)
    row.violations += [h.error for h in hits if h.error]
    whole_at, gap = wait_whole(scene, hits, lifted + row.bound)
    if whole_at is None:
        row.violations.append(f"not whole within {row.bound:.0f} s: {gap}")
    else:
        row.ready_seconds = max(0.0, whole_at - lifted)
    load.join(timeout=args.window + 40)
    if load.is_alive():
        row.violations.append("the load did not end within its bound")
    count(row, windows)
    judge_requests(row, faults, windows, whole_at, args.clients)
    judge_retractions(row, scene, ledgers, (time.monotonic() - started) / 60)
    row.notes += [n for h in hits for n in h.notes]
    ledgers.check(scene, row)


def judge_requests(
    row: Row, faults: tuple[Fault, ...], windows: dict[str, Window], whole_at: float | None, clients: int
) -> None:
    """What the window's faults may cost (see the module docstring), against what they did."""
    data = sum(f.path == "data" for f in faults)
    outage = any(f.path == "outage" for f in faults)
    cutoff = whole_at if whole_at is not None else math.inf
    row.allowed = "until whole" if outage else str(clients * data)
    for served in SERVED:
        load = windows[served.name]
        after = load.lost(started_after=cutoff)
        before = load.lost() - after
        allowed = math.inf if outage else clients * data if served is ALPHA else 0
        if before > allowed:
            row.violations.append(f"{served.name}: {before} lost (allowed {allowed})")
        if after:
            row.violations.append(f"{served.name}: {after} lost after the models were whole again")
        # A request in flight on a lost node gets no answer and no reset: only the client's timeout
        # ends it. So an outage may leave hung requests among those it may lose, never after whole.
        hung = sum(r.hung for r in load.requests if not outage or r.started >= cutoff)
        if hung:
            row.violations.append(f"{served.name}: {hung} requests hung past their bound")
        if not any(r.status == 200 for r in load.requests):
            row.violations.append(f"{served.name}: no request served")


def judge_retractions(row: Row, scene: Scene, ledgers: Ledgers, minutes: float) -> None:
    try:
        grown = ledgers.retractions.read(scene, SERVED)
    except API_DOWN as err:
        row.violations.append(f"retractions not read: {err!r}")
        return
    for name, retractions in grown.items():
        if retractions > MAX_RETRACTIONS_PER_MINUTE * minutes:
            row.violations.append(f"{name}: {retractions:.0f} retractions in {minutes:.1f} min")
    row.notes.append(f"retractions {sum(grown.values()):.0f}")


def delete_everything(scene: Scene, ledgers: Ledgers) -> Row:
    names = [s.name for s in SERVED] + scene.transient
    row = Row("delete every model", target=", ".join(names), bound=DELETE_BOUND)
    deleted = time.monotonic()
    scene.cluster.kubectl("delete", "qm", "-n", NS, *names, "--wait=false")
    found: list[str] = []
    while time.monotonic() < deleted + DELETE_BOUND:
        try:
            found = leftovers(scene, names)
        except API_DOWN as err:
            found = [f"not listed: {err!r}"]
        if not found:
            row.ready_seconds = time.monotonic() - deleted
            break
        time.sleep(1.0)
    row.violations += [f"left behind: {', '.join(found)}"] if found else []
    row.violations += ledgers.artifacts.check(scene)
    row.notes.append(f"{len(ledgers.artifacts.published)} published folders checked, kept (records stay)")
    return row


def estimate(faults: tuple[Fault, ...], args: argparse.Namespace) -> float:
    """Seconds a window is likely to take, so the soak stops scheduling before its time is up."""
    slow = sum(50.0 if f.bound > BOUND else 5.0 for f in faults)
    return float(args.window) + 15.0 + slow


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seed", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=1, help="passes over every fault alone")
    parser.add_argument("--pairs", type=int, default=2, help="overlapping pairs after the passes")
    parser.add_argument("--window", type=float, default=10.0, help="seconds of load per fault")
    parser.add_argument("--clients", type=int, default=3, help="closed-loop clients per model")
    parser.add_argument("--minutes", type=float, default=12.0, help="wall-clock budget of the whole soak")
    parser.add_argument("--skip", default="", help="faults to leave out, comma-separated (e.g. node-agent)")
    args = parser.parse_args()
    began = time.monotonic()
    budget_end = began + args.minutes * 60 - TEARDOWN
    commit = subprocess.run(
        ["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False
    ).stdout.strip()
    rng = random.Random(args.seed)
    plan = schedule(rng, args.rounds, args.pairs, {name for name in args.skip.split(",") if name})
    ledgers, rows = Ledgers(), []
    # Outlives the cluster: its threads start the processes a fault restarts (see window()).
    with ThreadPoolExecutor(max_workers=2, thread_name_prefix="fault") as pool, soak_scene() as scene:
        log("cluster, S3, Prometheus and operator up; applying the models")
        rows.append(setup(scene, ledgers, args))
        log(f"setup: {rows[-1].ready_seconds} s, {rows[-1].violations or 'ok'}")
        broken = "" if rows[-1].ready_seconds is not None else "setup never got whole"
        for faults in plan:
            name = " + ".join(f.name for f in faults)
            if broken or time.monotonic() + estimate(faults, args) > budget_end:
                why = broken or "the time budget (--minutes) is spent"
                rows.append(Row(name, target=f"not run: {why}"))
                continue
            log(f"window: {name}")
            rows.append(window(scene, faults, rng, ledgers, args, pool=pool))
            log(f"{name}: ready {rows[-1].ready_seconds}, {rows[-1].violations or 'ok'}")
            if rows[-1].ready_seconds is None:  # later faults would measure this one
                broken = f"the models never got whole after {name}"
        rows.append(delete_everything(scene, ledgers))
        rows.append(memory_row(ledgers.rss))
    when = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    minutes = (time.monotonic() - began) / 60
    title = (
        f"fault soak, seed {args.seed}, commit {commit}, {when}, {minutes:.1f} min; "
        f"{args.clients} clients x {args.window:.0f} s per window and model"
    )
    print(table(rows, title))
    sys.exit(1 if any(r.violations for r in rows) else 0)


if __name__ == "__main__":
    main()
