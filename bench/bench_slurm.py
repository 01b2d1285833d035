"""Jobs accepted by slurmctld per second: Gridlane's Slurm fabric vs a local sbatch loop vs naive SSH glue.

All three submit the same rendered scripts to the same slurmctld (the test cluster that `make bench`
brings up with tests/services/slurm/up.sh), as the same account:

    gridlane  what portal/worker/dispatch.py does with a cycle's newly admitted work: place_many,
              one SSH command over the fabric's persistent connection that, under the submit lock,
              reads the records of earlier batches and runs sbatch for the workloads without one
              (work whose dispatch was interrupted is also looked up with one squeue by job name:
              measured apart, as "resumed")
    local     a bash loop of sbatch run on the login node itself, timed there (no SSH at all)
    naive     one SSH command (`sbatch` with the script on stdin) per job, on one persistent connection

Jobs are submitted held (`#SBATCH --hold`), so the number is slurmctld's acceptance, not how fast two
cores run hundreds of jobs; each round's jobs are cancelled before the next. Gridlane and the local
loop run in paired rounds of alternating order, and the ratio is the median of the rounds' ratios:
on a shared machine a neighbour's load then hits both sides of a ratio alike.

Then the whole road through the portal, if DATABASE_URL names PostgreSQL: 1,000 workloads through the
API (one bulk request; then one request each, the naive baseline) -> admitted -> dispatched -> Slurm job
id, with a worker thread doing what the kick listener and its follow-up do, in a database of its own,
against a local sbatch loop of 1,000 jobs. Reported: jobs per second from the first request to the last
job id, as a ratio to the loop, and the p50 of each workload's 201 -> job id.

Arrays (`array_case`): a 1,000-element array of held jobs, side by side in one run: as Gridlane sends it
(one sbatch, `--array=0-999`) and as one sbatch per element (each a one-task array, as before arrays had
their own sbatch): sbatch calls and seconds for each, and their ratio. With PostgreSQL, the same array
through the API and the worker: how many admit steps and scheduling rounds (decide() calls, each over
GRIDLANE_CANDIDATES_PER_QUEUE candidates) admit it all (goal: fewer than 5), and how many sbatch calls
its dispatch makes (goal: 1).
"""

from __future__ import annotations

import json
import os
import re
import statistics
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any
from unittest import mock

from fabrics.base import FabricConfig, JobSpec, Resources, place_many
from fabrics.slurm.fabric import SlurmFabric
from scheduler import decide

ROOT = Path(__file__).resolve().parents[1]
JOBS = 200
ROUNDS = 5
NAIVE_JOBS = 60  # one SSH command each: enough to time it
E2E_JOBS = 1000
ARRAY_ELEMENTS = 1000
HELD = "#!/bin/bash\n#SBATCH --hold\nexec /bin/bash -c $command\n"


def run() -> dict[str, Any]:
    settings = cluster_settings()
    fabric = SlurmFabric(FabricConfig("bench", "slurm", Resources(), settings))
    fabric.ssh.run(["scancel", "--me"])
    rounds: dict[str, list[float]] = {"gridlane": [], "local": []}
    ratios = []
    for r in range(ROUNDS):
        # Paired rounds, order alternating: a neighbour's load hits both sides of a ratio alike.
        order: list[tuple[str, Callable[[SlurmFabric, int], float]]] = [("gridlane", gridlane), ("local", local_loop)]
        for path, measure in order if r % 2 == 0 else order[::-1]:
            rounds[path].append(measure(fabric, JOBS))
        ratios.append(rounds["gridlane"][-1] / rounds["local"][-1])
        print(f"round {r + 1}: gridlane {rounds['gridlane'][-1]:6.1f} jobs/s, local {rounds['local'][-1]:6.1f}")
    rounds["naive"] = [naive(fabric, NAIVE_JOBS)]
    rounds["resumed"] = [gridlane(fabric, JOBS, resumed=True) for _ in range(2)]
    best = {path: max(rates) for path, rates in rounds.items()}
    vs_local, vs_naive = statistics.median(ratios), best["gridlane"] / best["naive"]
    print(
        f"slurm submit, {JOBS} held jobs per round: gridlane {best['gridlane']:.1f} jobs/s (best of {ROUNDS}), "
        f"local sbatch loop {best['local']:.1f}, naive SSH per job {best['naive']:.1f}; gridlane/local = "
        f"{vs_local:.2f}x (median of paired rounds; goal >= 0.9x), gridlane/naive = {vs_naive:.1f}x (goal >= 5x); "
        f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs"
    )
    print(
        f"slurm submit, a resumed batch (squeue asked about every workload first, as after a crash): "
        f"{best['resumed']:.1f} jobs/s (best of 2), {best['resumed'] / best['local']:.2f}x the best local loop; "
        f"{len(fabric.ssh.run(['squeue', '--me', '--states=all', '--noheader', '--format=%i']).stdout.split())} "
        "jobs in slurmctld's memory"
    )
    results: dict[str, Any] = {
        "jobs": JOBS,
        "jobs_per_second": {k: round(v, 1) for k, v in best.items()},
        "rounds": {k: [round(x, 1) for x in v] for k, v in rounds.items()},
        "gridlane_vs_local": round(vs_local, 2),
        "gridlane_vs_naive": round(vs_naive, 1),
        "resumed_vs_local": round(best["resumed"] / best["local"], 2),
        "load_average": round(os.getloadavg()[0], 1),
    }
    results["array"] = array_case(fabric)
    if os.environ.get("DATABASE_URL", "").startswith("postgres"):
        results["end_to_end"] = end_to_end(settings, fabric)
        results["array"] |= array_road(settings)
    else:
        print("end to end: skipped (DATABASE_URL is not PostgreSQL)")
    fabric.ssh.run(["scancel", "--me"])
    fabric.close()
    return results


def cluster_settings() -> dict[str, Any]:
    state = Path(os.environ.get("GRIDLANE_TEST_STATE", ROOT / "var" / "test-services"))
    path = state / "slurm" / "connection.json"
    if not path.exists():
        raise SystemExit(f"bench slurm: the test cluster is not up ({path} is missing); run it through `make bench`")
    conn = json.loads(path.read_text())
    return {key: conn[key] for key in ("host", "port", "user", "known_hosts", "key_file")} | {"partition": "cpu"}


def array_specs(n: int, *, each_alone: bool) -> list[JobSpec]:
    """n elements of one array; each_alone: each in an array of its own, so each goes as its own sbatch."""
    array = str(uuid.uuid4())
    return [
        replace(job, command="echo $GRIDLANE_ARRAY_INDEX", array=str(i),
                array_id=str(uuid.uuid4()) if each_alone else array,
                env={"GRIDLANE_ARRAY_INDEX": str(i), "GRIDLANE_ARRAY_ID": array})
        for i, job in enumerate(specs(n))
    ]  # fmt: skip


def array_case(fabric: SlurmFabric) -> dict[str, Any]:
    """1,000 elements as one sbatch and as one sbatch per element, in paired rounds of alternating order."""
    seconds: dict[str, list[float]] = {"one sbatch": [], "sbatch per element": []}
    calls: dict[str, int] = {}
    for r in range(2):
        order = list(seconds) if r % 2 == 0 else list(seconds)[::-1]
        for path in order:
            jobs = array_specs(ARRAY_ELEMENTS, each_alone=path == "sbatch per element")
            started = time.perf_counter()
            placed = place_many(fabric, jobs, fresh={job.workload_id for job in jobs})
            seconds[path].append(time.perf_counter() - started)
            ids = [v for v in placed.values() if isinstance(v, str)]
            if len(ids) != ARRAY_ELEMENTS:
                raise RuntimeError(f"array ({path}): {[str(v) for v in placed.values() if not isinstance(v, str)][:3]}")
            calls[path] = len({i.split("_")[0] for i in ids})  # each sbatch is one Slurm job id
            cancel(fabric, sorted({i.split("_")[0] for i in ids}))
    best = {path: min(values) for path, values in seconds.items()}
    ratio = best["sbatch per element"] / best["one sbatch"]
    print(
        f"slurm array, {ARRAY_ELEMENTS} elements: one sbatch {best['one sbatch']:.2f} s ({calls['one sbatch']} sbatch"
        f" call), one sbatch per element {best['sbatch per element']:.2f} s ({calls['sbatch per element']} calls);"
        f" {ratio:.1f}x faster as one array"
    )
    return {"elements": ARRAY_ELEMENTS, "sbatch_calls": calls, "seconds": {k: round(v, 3) for k, v in best.items()},
            "speedup": round(ratio, 1)}  # fmt: skip


def array_road(settings: dict[str, Any]) -> dict[str, Any]:
    """The array through the API and the worker: admit steps and scheduling rounds to admit it, sbatch calls."""
    django_setup()
    from rest_framework.test import APIClient

    from portal.accounts.models import ApiToken
    from portal.queues.models import Fabric
    from portal.worker import connections, tasks
    from portal.workloads.models import Workload
    from portal.workloads.states import State

    alice = fresh_cast(settings)
    _, token = ApiToken.issue(alice, "bench")
    client = APIClient(SERVER_NAME="127.0.0.1")
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    body = {"queue": "hpc", "kind": "batch", "name": "sweep", "command": "true", "array": f"0-{ARRAY_ELEMENTS - 1}",
            "resources": {"gpus": 0, "cpus": 1, "memory_gb": 1}}  # fmt: skip
    response = client.post("/api/v1/workloads/", body, format="json")
    if response.status_code != 201:
        raise RuntimeError(f"API: {response.status_code} {response.content[:300]!r}")
    elements = Workload.objects.filter(array_parent_id=response.json()["id"])
    rounds, steps = [0], 0

    def counted(snapshot: Any) -> Any:
        rounds[0] += 1
        return decide(snapshot)

    with mock.patch.object(tasks, "decide", counted):
        while elements.filter(state=State.PENDING).exists() and steps < 20:
            tasks.admit()
            steps += 1
    tasks.dispatch()
    ids = [i for i in elements.values_list("external_id", flat=True) if i]
    fabric = connections.fabric_for(Fabric.objects.get(name="hpc"))
    jobs = sorted({i.split("_")[0] for i in ids})
    if isinstance(fabric, SlurmFabric):
        cancel(fabric, jobs)
    connections.forget_all()
    print(
        f"slurm array through the portal, {ARRAY_ELEMENTS} elements: admitted in {steps} admit step(s) of"
        f" {rounds[0]} scheduling round(s) (goal < 5); dispatched {len(ids)} as {len(jobs)} sbatch call(s) (goal 1)"
    )
    return {
        "admit_steps": steps,
        "scheduling_rounds": rounds[0],
        "dispatched": len(ids),
        "portal_sbatch_calls": len(jobs),
    }


def specs(n: int) -> list[JobSpec]:
    return [
        JobSpec(
            workload_id=uuid.uuid4(),
            name=f"bench-{i}",
            kind="batch",
            owner="alice",
            group="vision",
            queue="hpc",
            command=f"echo {i}",
            per_node=Resources(0, 1000, 256),
            runtime_limit_s=600,
            template=HELD,
        )
        for i in range(n)
    ]


def cancel(fabric: SlurmFabric, ids: list[str]) -> None:
    for i in range(0, len(ids), 500):
        fabric.ssh.run(["scancel", *ids[i : i + 500]])


def gridlane(fabric: SlurmFabric, n: int, *, resumed: bool = False) -> float:
    """As the dispatcher with newly admitted work (their records are read, squeue is not asked about
    them); or, resumed, with work whose dispatch was interrupted (squeue asked about every one)."""
    jobs = specs(n)
    for job in jobs:
        fabric.render(job)  # the dispatcher renders each job for the record before anything leaves
    started = time.perf_counter()
    placed = place_many(fabric, jobs, fresh=set() if resumed else {job.workload_id for job in jobs})
    elapsed = time.perf_counter() - started
    ids = [v for v in placed.values() if isinstance(v, str)]
    if len(ids) != n:
        errors = [str(v) for v in placed.values() if not isinstance(v, str)]
        raise RuntimeError(f"gridlane: {len(errors)} submissions failed: {errors[:3]}")
    cancel(fabric, ids)
    return n / elapsed


def local_loop(fabric: SlurmFabric, n: int) -> float:
    """sbatch in a bash loop on the login node, timed there; the scripts are put in place first."""
    folder = f".gridlane/bench-{uuid.uuid4().hex[:8]}"
    setup = [f"mkdir -p {folder}"]
    for i, job in enumerate(specs(n)):
        setup.append(f"cat > {folder}/{i:04d}.sh <<'EOF_BENCH'\n{fabric.render(job)}EOF_BENCH")
    if not fabric.ssh.run_script("\n".join(setup) + "\n").ok:
        raise RuntimeError("local: could not write the scripts")
    loop = (
        f"cd {folder} && start=$(date +%s.%N) && for f in *.sh; do sbatch --parsable $f; done && "
        'end=$(date +%s.%N) && echo "elapsed $start $end"'
    )
    result = fabric.ssh.run(["bash", "-c", loop])
    fabric.ssh.run(["rm", "-rf", folder])
    ids = re.findall(r"^(\d+)$", result.stdout, re.M)
    start, end = (float(x) for x in re.findall(r"elapsed (\S+) (\S+)", result.stdout)[0])
    if len(ids) != n:
        raise RuntimeError(f"local: {result.stderr[:300]}")
    cancel(fabric, ids)
    return n / (end - start)


def naive(fabric: SlurmFabric, n: int) -> float:
    jobs = specs(n)
    scripts = [fabric.render(job) for job in jobs]
    started = time.perf_counter()
    ids = [fabric.ssh.run(["sbatch", "--parsable"], stdin=script).stdout.strip() for script in scripts]
    elapsed = time.perf_counter() - started
    cancel(fabric, ids)
    return n / elapsed


# The whole road ---------------------------------------------------------------------------------------
def end_to_end(settings: dict[str, Any], fabric: SlurmFabric) -> dict[str, Any]:
    """E2E_JOBS workloads through the API to Slurm job ids, with a worker thread doing what the kick listener
    and its follow-up thread do (admit, then dispatch and sync) back to back: sent in one bulk request, and
    (the naive baseline) as one request each; both against a local sbatch loop of as many jobs, timed beside."""
    django_setup()
    from portal.worker import connections

    local = local_loop(fabric, E2E_JOBS)
    rows = {"bulk": road(settings, bulk=True), "one request each": road(settings, bulk=False)}
    connections.forget_all()
    for name, row in rows.items():
        row["vs_local_loop"] = round(row["jobs_per_second"] / local, 2)
        print(
            f"end to end, {E2E_JOBS} API submissions ({name}) -> Slurm job ids: {row['dispatched']} dispatched, "
            f"{row['jobs_per_second']:.1f} jobs/s = {row['vs_local_loop']:.2f}x the local sbatch loop "
            f"({local:.1f} jobs/s; goal >= 0.5x for the bulk); API 201 -> job id p50 {row['p50_s']:.2f} s"
        )
    return {"jobs": E2E_JOBS, "local_loop_jobs_per_second": round(local, 1)} | rows


def road(settings: dict[str, Any], *, bulk: bool) -> dict[str, Any]:
    from django.db import connection
    from rest_framework.test import APIClient

    from portal.accounts.models import ApiToken
    from portal.queues.models import Fabric
    from portal.worker import connections, tasks
    from portal.workloads.models import Workload

    alice = fresh_cast(settings)
    _, token = ApiToken.issue(alice, "bench")
    client = APIClient(SERVER_NAME="127.0.0.1")
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    created: dict[str, float] = {}
    placed: dict[str, float] = {}
    done = threading.Event()

    def worker() -> None:
        try:
            while not done.is_set():
                tasks.admit()
                tasks.follow_up()
                now = time.perf_counter()
                for pk in Workload.objects.exclude(external_id="").values_list("pk", flat=True):
                    placed.setdefault(str(pk), now)
                if len(placed) >= E2E_JOBS:
                    return
        finally:
            connection.close()

    thread = threading.Thread(target=worker, daemon=True)
    thread.start()
    body = {"queue": "hpc", "kind": "batch", "command": "true", "resources": {"gpus": 0, "cpus": 1, "memory_gb": 1}}
    first = time.perf_counter()
    try:
        if bulk:
            items = [body | {"name": f"e2e-{i}"} for i in range(E2E_JOBS)]
            response = client.post("/api/v1/workloads/bulk/", {"items": items}, format="json")
            if response.status_code != 201:
                raise RuntimeError(f"API: {response.status_code} {response.content[:300]!r}")
            now = time.perf_counter()
            created = {str(item["id"]): now for item in response.json()["items"]}
        else:
            for i in range(E2E_JOBS):
                response = client.post("/api/v1/workloads/", body | {"name": f"e2e-{i}"}, format="json")
                if response.status_code != 201:
                    raise RuntimeError(f"API: {response.status_code} {response.content[:300]!r}")
                created[str(response.json()["id"])] = time.perf_counter()
        thread.join(600)
    finally:
        done.set()
    last = max(placed.values(), default=first)
    latencies = sorted(placed[pk] - created[pk] for pk in created if pk in placed)
    ids = list(Workload.objects.exclude(external_id="").values_list("external_id", flat=True))
    fabric = connections.fabric_for(Fabric.objects.get(name="hpc"))
    if isinstance(fabric, SlurmFabric):
        cancel(fabric, ids)
    return {
        "dispatched": len(placed),
        "jobs_per_second": round(len(placed) / (last - first), 1),
        "p50_s": round(statistics.median(latencies), 3) if latencies else float("nan"),
    }


def django_setup() -> None:
    """Django on the benchmarks' own database (see bench_scheduler)."""
    from bench import bench_scheduler

    bench_scheduler.django_setup()


def fresh_cast(settings: dict[str, Any]) -> Any:
    """The demo cast, and a Slurm fabric `hpc` behind a queue `hpc` whose template holds every job."""
    from django.contrib.auth import get_user_model
    from django.core.management import call_command

    from portal.accounts.models import ResourceGroup
    from portal.queues.models import Fabric, Queue, QueueTarget

    call_command("flush", interactive=False, verbosity=0)
    call_command("seed_demo", stdout=open(os.devnull, "w"))  # noqa: SIM115
    # Slurm queues the work itself: the portal's declared capacity must not be what holds it back.
    fabric = Fabric.objects.create(
        name="hpc", kind="slurm", cpus_milli=10**8, memory_mib=10**9, gpu_sharing=False, settings=settings
    )
    queue = Queue.objects.create(slug="hpc", name="HPC", kinds=["batch"], default_runtime_minutes=10)
    queue.allowed_groups.add(*ResourceGroup.objects.all())
    QueueTarget.objects.create(queue=queue, fabric=fabric, template=HELD)
    return get_user_model().objects.get(username="alice")
