"""Routing on what fabrics have free now, against today's declared routing, side by side in one run.

The real test Slurm cluster (its partition `cpu`: one node of 32 CPUs) is kept about 90 % busy by another POSIX
user (gl-charlie, not Gridlane): a bash loop of plain `sbatch` that keeps FILL_CPUS of its CPUs asked for (jobs
of 2 or 4 CPUs sleeping FILL_SLEEP_S seconds), submitting a new job as each ends. Beside it, a second fabric with
room: the local fabric (LOCAL_CPUS CPUs, jobs run as processes on this host). A Gridlane queue has the targets
[Slurm, local], in that order; IT declares Slurm's partition whole (32 CPUs).

Each mode gets the same JOBS workloads through the API, one request each, at the same (seeded) arrival times
over ARRIVAL_S seconds: mixed sizes (1, 2 or 4 CPUs, 1 to 4 GB), each sleeping RUNTIME_S seconds; a worker
thread runs the periodic cycle (sync, capacity, admit, dispatch) back to back, as the worker does:

    declared  GRIDLANE_LIVE_ROUTING=0: Slurm is planned with its declaration, so Gridlane's work goes there
              first (up to its declared 32 CPUs) and waits in Slurm's queue behind the other user's jobs
    live      Slurm's free CPUs observed every CAPACITY_S (sinfo + squeue --start in one SSH command): work goes
              where it can start now; work that waited past the queue's patience (PATIENCE_S) while another
              target has room is pulled back

Time is scaled down from a site's (runtimes of seconds, not hours): the observation period and the patience
with it. Reported: p95 (and p50) of each workload's submit -> start (its `started_at`, the fabric's own start
time, less its `submitted_at`), the ratio live/declared (goal <= 0.2x), and the jobs run twice or lost (goal 0),
counted three ways: each run of a job leaves a mark file (the command makes one, so a second run is seen
whatever Gridlane believes), the workload's events (transitions to running), and sacct's jobs for every attempt's
Slurm job name that got a node. Every Slurm job the bench starts (the other user's, by its job name; Gridlane's,
by every attempt's job name) is cancelled at the end, whatever happened.
"""

from __future__ import annotations

import logging
import math
import os
import random
import shutil
import statistics
import subprocess
import tempfile
import threading
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
JOBS = 200
ARRIVAL_S = 45.0  # the JOBS submissions are spread over this long (exponential gaps, seeded)
SIZES = ((1, 1), (1, 2), (2, 2), (2, 4), (4, 4))  # (CPUs, GB), drawn evenly
RUNTIME_S = (2, 6)  # each job sleeps this long (whole seconds, drawn evenly)
SLURM_CPUS = 32  # the partition `cpu` of the test cluster: IT's declaration
FILL_CPUS = 29  # what the other user keeps asked for: ~90 % of SLURM_CPUS
FILL_SLEEP_S = (15, 40)
LOCAL_CPUS = 64
CAPACITY_S = 3.0  # the observation period (a site's 30 s, scaled down as the runtimes are)
PATIENCE_S = 10  # the queue's patience in Slurm's queue (a site's 300 s, scaled down)
DRAIN_S = 240.0  # after the last submit, how long a mode may take to run everything
OTHER = "gl-charlie"  # a person with a cluster account of their own (tests/services/slurm/people.sh)
FILL_LOOP = r"""
user=$1 tag=$2 target=$3 stop=$4 lo=$5 hi=$6 bench=$7 until=$(( $(date +%s) + 900 ))
# Ends when told, when the bench's process is gone (killed), or after 15 minutes, whichever is first.
while [ ! -e "$stop" ] && [ -d "/proc/$bench" ] && [ "$(date +%s)" -lt "$until" ]; do
  asked=$(squeue -h -u "$user" -n "rb-fill-$tag" -o %C | awk '{s += $1} END {print s + 0}')
  while [ "$asked" -lt "$target" ]; do
    c=$(( (RANDOM % 2 + 1) * 2 )); [ $((asked + c)) -gt "$target" ] && c=$((target - asked))
    sbatch -Q -A gl-fraud -p cpu -c "$c" --mem=512M -t 2 -o /dev/null -J "rb-fill-$tag" \
      --wrap "sleep $((lo + RANDOM % (hi - lo + 1)))" >/dev/null || break
    asked=$((asked + c))
  done
  sleep 0.5
done
"""


def run() -> dict[str, Any]:
    if not os.environ.get("DATABASE_URL", "").startswith("postgres"):
        print("routing: skipped (DATABASE_URL is not PostgreSQL)")
        return {"skipped": "DATABASE_URL is not PostgreSQL"}
    from bench.bench_slurm import cluster_settings, django_setup

    settings = cluster_settings()
    django_setup()
    subprocess.run([tool("bash"), str(ROOT / "tests/services/slurm/people.sh")], check=True, timeout=300)
    logging.getLogger("gridlane").setLevel(logging.WARNING)  # the worker's per-cycle lines, 400 workloads' worth
    tag = uuid.uuid4().hex[:8]
    marks = Path(tempfile.mkdtemp(prefix=f"gridlane-routing-{tag}-"))
    marks.chmod(0o1777)  # Slurm's jobs run as Gridlane's submit account, the local ones as this process
    filler = Filler(tag, marks)
    names: list[str] = []  # every Slurm job name Gridlane may have used (each attempt's), for the cleanup
    results: dict[str, Any] = {}
    try:
        filler.start()
        plan = arrivals(random.Random(49))
        for mode in ("declared", "live"):
            busy = filler.wait_busy()  # each mode starts on a cluster the other user holds ~90 % of
            stop, samples = threading.Event(), list[tuple[float, float]]()
            sampler = threading.Thread(target=filler.sample, args=(stop, samples), daemon=True)
            sampler.start()
            try:
                results[mode] = one_mode(mode, settings, plan, marks, names)
            finally:
                stop.set()
                sampler.join(60)
            results[mode] |= {
                "slurm_busy_before": busy,
                "slurm_other_user_share": round(statistics.mean(o for o, _ in samples), 3) if samples else None,
                "slurm_busy_share": round(statistics.mean(b for _, b in samples), 3) if samples else None,
            }
    finally:
        filler.stop()
        cancel_named(names)
        shutil.rmtree(marks, ignore_errors=True)
    declared, live = results["declared"], results["live"]
    ratio = live["p95_s"] / declared["p95_s"] if declared["p95_s"] else float("nan")
    results |= {"jobs": JOBS, "arrival_s": ARRIVAL_S, "p95_ratio": round(ratio, 3)}
    for mode in ("declared", "live"):
        row = results[mode]
        print(
            f"routing, {mode:8s}: submit -> start p50 {row['p50_s']:5.1f} s, p95 {row['p95_s']:5.1f} s, max "
            f"{row['max_s']:5.1f} s; ran on {row['ran_on']}; moved {row['moved']}; run twice {row['run_twice']}, "
            f"lost {row['lost']}; Slurm {100 * row['slurm_busy_before']:.0f} % busy at the start, on average "
            f"{100 * (row['slurm_other_user_share'] or 0):.0f} % held by the other user and "
            f"{100 * (row['slurm_busy_share'] or 0):.0f} % by anyone"
        )
    print(
        f"routing, {JOBS} jobs over {ARRIVAL_S:.0f} s, Slurm ~{100 * FILL_CPUS / SLURM_CPUS:.0f} % asked for by "
        f"another user: p95 submit -> start live/declared = {ratio:.3f}x (goal <= 0.2x); run twice "
        f"{declared['run_twice'] + live['run_twice']}, lost {declared['lost'] + live['lost']} (goal 0)"
    )
    return results


def tool(name: str) -> str:
    """A command of the cluster's node (this host), by its full path."""
    path = shutil.which(name)
    if path is None:
        raise SystemExit(f"bench routing: {name} is not on PATH (the Slurm test cluster runs on this host)")
    return path


def arrivals(rng: random.Random) -> list[tuple[float, int, int, int]]:
    """Each job's (offset from the first submit, CPUs, GB, seconds it runs), the same for both modes."""
    gaps = [rng.expovariate(1.0) for _ in range(JOBS)]
    scale = ARRIVAL_S / sum(gaps)
    out, at = [], 0.0
    for gap in gaps:
        cpus, gb = rng.choice(SIZES)
        out.append((at, cpus, gb, rng.randint(*RUNTIME_S)))
        at += gap * scale
    return out


class Filler:
    """The other user's sbatch stream (FILL_LOOP, run as OTHER), stopped and its jobs cancelled at the end."""

    def __init__(self, tag: str, marks: Path) -> None:
        self.name = f"rb-fill-{tag}"
        self.tag = tag
        self.stop_file = marks / "stop-filling"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        argv = [tool("runuser"), "-u", OTHER, "--", tool("bash"), "-c", FILL_LOOP, "fill", OTHER, self.tag,
                str(FILL_CPUS), str(self.stop_file), *(str(s) for s in FILL_SLEEP_S), str(os.getpid())]  # fmt: skip
        self.process = subprocess.Popen(
            argv, cwd=self.stop_file.parent, start_new_session=True, stdout=subprocess.DEVNULL
        )

    def sample(self, stop: threading.Event, into: list[tuple[float, float]]) -> None:
        """Every 2 s until `stop`: the share of the partition's CPUs the other user's running jobs hold, and the
        share allocated to anyone (Gridlane included)."""
        while not stop.wait(2.0):
            out = subprocess.run([tool("squeue"), "-h", "-u", OTHER, "-n", self.name, "-t", "R", "-o", "%C"],
                                 capture_output=True, text=True, timeout=60)  # fmt: skip
            into.append((sum(int(x) for x in out.stdout.split()) / SLURM_CPUS, self.busy_share()))

    def busy_share(self) -> float:
        """The share of the partition's CPUs allocated now, to anyone."""
        out = subprocess.run([tool("sinfo"), "-h", "-p", "cpu", "-o", "%C"], capture_output=True, text=True, timeout=60)
        allocated, _, _, total = (int(x) for x in out.stdout.split()[0].split("/"))
        return round(allocated / total, 3) if total else 0.0

    def wait_busy(self, timeout: float = 120.0) -> float:
        deadline = time.monotonic() + timeout
        while (busy := self.busy_share()) < (FILL_CPUS - 1) / SLURM_CPUS and time.monotonic() < deadline:
            time.sleep(1)
        return busy

    def stop(self) -> None:
        self.stop_file.touch()
        if self.process is not None:
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, 9)  # the session this bench started, by its id
                self.process.wait(timeout=30)
        subprocess.run([tool("scancel"), "-u", OTHER, "-n", self.name], check=False, timeout=60)


def cancel_named(names: list[str]) -> None:
    """Cancel Gridlane's Slurm jobs of these names, if any is left (as root, on the cluster's node)."""
    for at in range(0, len(names), 200):
        subprocess.run([tool("scancel"), "-n", ",".join(names[at : at + 200])], check=False, timeout=60)


def setup(mode: str, settings: dict[str, Any], marks: Path) -> tuple[Any, Any]:
    """A fresh demo cast; Slurm `hpc` (its partition declared whole) and the local fabric behind queue `route`.
    Returns the API client of alice (vision) and the Slurm fabric's row."""
    from django.contrib.auth import get_user_model
    from django.core.management import call_command
    from rest_framework.test import APIClient

    from portal.accounts.models import ApiToken, ResourceGroup
    from portal.queues.models import Fabric, Queue, QueueTarget, Quota

    call_command("flush", interactive=False, verbosity=0)
    call_command("seed_demo", stdout=open(os.devnull, "w"))  # noqa: SIM115
    Quota.objects.all().delete()  # no team's reservation draws work to one fabric: the queue's order and room do
    local = Fabric.objects.get(name="local")
    local.cpus_milli, local.memory_mib = LOCAL_CPUS * 1000, 256 * 1024
    local.settings = {**local.settings, "root": str(marks / f"local-{mode}")}
    local.save()
    hpc = Fabric.objects.create(name="hpc", kind="slurm", cpus_milli=SLURM_CPUS * 1000, memory_mib=64000,
                                gpu_sharing=False, settings=settings | {"partition": "cpu"})  # fmt: skip
    queue = Queue.objects.create(slug="route", name="Routed", kinds=["batch"], default_runtime_minutes=2,
                                 pullback_patience_seconds=PATIENCE_S)  # fmt: skip
    queue.allowed_groups.add(*ResourceGroup.objects.all())
    QueueTarget.objects.create(queue=queue, fabric=hpc, order=0)
    QueueTarget.objects.create(queue=queue, fabric=local, order=1)
    _, token = ApiToken.issue(get_user_model().objects.get(username="alice"), "bench")
    client = APIClient(SERVER_NAME="127.0.0.1")
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    return client, hpc


def one_mode(mode: str, settings: dict[str, Any], plan: list[tuple[float, int, int, int]], marks: Path,
             names: list[str]) -> dict[str, Any]:  # fmt: skip
    """The JOBS workloads through the API and the worker with live routing on or off; their numbers."""
    from django.conf import settings as django_settings
    from django.db import connection

    from portal.worker import capacity, connections, tasks
    from portal.workloads.models import Workload
    from portal.workloads.states import ACTIVE

    django_settings.GRIDLANE_LIVE_ROUTING = mode == "live"
    django_settings.GRIDLANE_CAPACITY_SECONDS = CAPACITY_S
    connections.forget_all()
    capacity._asked.clear()
    client, hpc = setup(mode, settings, marks)
    done, failures = threading.Event(), []

    def worker() -> None:
        try:
            while not done.is_set():
                tasks.cycle()
                time.sleep(0.1)
        except Exception as error:  # the bench reports it, and stops waiting
            failures.append(repr(error))
            done.set()
        finally:
            connection.close()

    thread = threading.Thread(target=worker, daemon=True)
    thread.start()
    ids: list[str] = []
    try:
        first = time.monotonic()
        for i, (at, cpus, gb, seconds) in enumerate(plan):
            time.sleep(max(0.0, first + at - time.monotonic()))
            command = f"mktemp -p {marks} {mode}-{i}.XXXXXX >/dev/null && sleep {seconds}"
            body = {"queue": "route", "kind": "batch", "name": f"rb-{i}", "command": command,
                    "resources": {"gpus": 0, "cpus": cpus, "memory_gb": gb}}  # fmt: skip
            response = client.post("/api/v1/workloads/", body, format="json")
            if response.status_code != 201:
                raise RuntimeError(f"API: {response.status_code} {response.content[:300]!r}")
            ids.append(str(response.json()["id"]))
        deadline = time.monotonic() + DRAIN_S
        while not done.is_set() and time.monotonic() < deadline:
            if not Workload.objects.filter(pk__in=ids, state__in=ACTIVE).exists():
                break
            time.sleep(1)
    finally:
        done.set()
        thread.join(60)
        found = list(Workload.objects.filter(pk__in=ids).select_related("fabric"))
        names += [f"gl-{run}" for w in found for run in runs_of(w)]
        cancel_named(names)
        connections.forget_all()
    if failures:
        raise RuntimeError(f"routing ({mode}): the worker failed: {failures[0]}")
    return numbers(mode, found, marks, hpc)


def runs_of(w: Any) -> list[uuid.UUID]:
    """Every attempt's run id (each attempt's Slurm job is named gl-<run id>)."""
    from portal.workloads.models import run_id_of

    return [run_id_of(w.pk, attempt) for attempt in range(w.attempt + 1)]


def numbers(mode: str, found: list[Any], marks: Path, hpc: Any) -> dict[str, Any]:
    """p50/p95/max submit -> start; where the work ran; jobs run twice or lost, three ways (module docstring)."""
    from portal.workloads.models import WorkloadEvent
    from portal.workloads.states import State

    waits = sorted(max(0.0, (w.started_at - w.submitted_at).total_seconds()) for w in found if w.started_at)
    index = {w.pk: int(w.name.split("-")[1]) for w in found}
    ran_marks = Counter(int(p.name.split(".")[0].split("-")[1]) for p in marks.glob(f"{mode}-*.*"))
    events = WorkloadEvent.objects.filter(workload__in=found)
    ran_events = Counter(events.filter(to_state=State.RUNNING).values_list("workload_id", flat=True))
    moved = events.filter(reason__startswith="moving").values("workload_id").distinct().count()
    on_slurm = slurm_runs(found)
    twice = {
        w.pk for w in found
        if ran_marks[index[w.pk]] > 1 or ran_events[w.pk] > 1 or on_slurm.get(w.pk, 0) > 1
        or (on_slurm.get(w.pk, 0) == 1 and w.fabric_id != hpc.pk)
    }  # fmt: skip
    lost = {w.pk for w in found if w.state != State.SUCCEEDED or ran_marks[index[w.pk]] == 0}
    return {
        "workloads": len(found),
        "started": len(waits),
        "p50_s": round(statistics.median(waits), 2) if waits else float("nan"),
        "p95_s": round(percentile(waits, 0.95), 2) if waits else float("nan"),
        "max_s": round(waits[-1], 2) if waits else float("nan"),
        "ran_on": dict(Counter(w.fabric.name if w.fabric else "-" for w in found)),
        "moved": moved,
        "run_twice": len(twice),
        "lost": len(lost),
        "slurm_jobs_started": sum(on_slurm.values()),
    }


def percentile(sorted_values: list[float], q: float) -> float:
    """The nearest-rank percentile of sorted values."""
    return sorted_values[max(1, math.ceil(q * len(sorted_values))) - 1]


def slurm_runs(found: list[Any]) -> dict[Any, int]:
    """How many Slurm jobs of each workload (any attempt) got a node, by sacct on the cluster's node."""
    by_name = {f"gl-{run}": w.pk for w in found for run in runs_of(w)}
    names = list(by_name)
    out: Counter[Any] = Counter()
    for at in range(0, len(names), 200):
        result = subprocess.run(
            [tool("sacct"), "-X", "-n", "-P", "-S", "now-1hours", "-o", "JobName,NodeList", "--name",
             ",".join(names[at : at + 200])],
            capture_output=True, text=True, check=True, timeout=120,
        )  # fmt: skip
        for line in result.stdout.splitlines():
            name, _, nodes = line.partition("|")
            if name in by_name and nodes and nodes != "None assigned":
                out[by_name[name]] += 1
    return dict(out)
