"""Native scripts against plain resource requests: the same submit road, side by side in one run.

    plain   POST /api/v1/workloads/ with a command and resources, then one admission (snapshot, decide,
            apply) for the round's workloads
    native  the same with an sbatch script instead: its #SBATCH block read into the request and checked
            against the queue target's policy, then the same admission
Rounds alternate their order, and the ratio is the median of the rounds' ratios (goal: at most 1.2).

Then arrays: a 1,000-element array (no % limit) on a Slurm queue big enough for all of it, and how many
scheduling cycles (admission only, nothing dispatched) it takes until every element is admitted.
"""

from __future__ import annotations

import json
import statistics
import time
from typing import Any

from bench.bench_scheduler import django_setup

N = 100
ROUNDS = 6
SCRIPT = """#!/bin/bash
#SBATCH --job-name=bench
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=2
#SBATCH --gpus-per-node=1
#SBATCH --cpus-per-task=2
#SBATCH --mem=4G
#SBATCH --time=00:30:00
#SBATCH --output=%x-%j.out
srun python train.py --epochs 3
"""
PLAIN = {"command": "python train.py --epochs 3", "resources": {"gpus": 1, "cpus": 4, "memory_gb": 4, "nodes": 1},
         "runtime_limit_minutes": 30}  # fmt: skip


def _setup() -> Any:
    from django.contrib.auth import get_user_model
    from django.core.management import call_command
    from rest_framework.test import APIClient

    from portal.accounts.models import ApiToken, ResourceGroup
    from portal.queues.models import Fabric, Queue, QueueTarget

    call_command("flush", interactive=False, verbosity=0)
    call_command("seed_demo", verbosity=0)
    cluster = Fabric.objects.create(
        name="cluster", kind="slurm", gpus_milli=10**7, cpus_milli=10**8, memory_mib=10**10, settings={}
    )
    queue = Queue.objects.create(slug="hpc", name="HPC", kinds=["training", "batch"], max_runtime_minutes=600)
    queue.allowed_groups.add(*ResourceGroup.objects.all())
    QueueTarget.objects.create(queue=queue, fabric=cluster, native={"forced": {"partition": "gpu"}})
    _, token = ApiToken.issue(get_user_model().objects.get(username="alice"), "bench")
    client = APIClient(SERVER_NAME="127.0.0.1")
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    return client


def _admit() -> int:
    from django.utils import timezone

    from portal.worker import apply, snapshot
    from scheduler import decide

    snap, pending = snapshot.build(timezone.now())
    decisions = decide(snap)
    apply.apply(decisions, pending)
    return len(decisions.admit)


def _round(client: Any, body: dict[str, Any]) -> float:
    from portal.workloads.models import Workload

    Workload.objects.all().delete()
    started = time.perf_counter()
    for _ in range(N):
        response = client.post("/api/v1/workloads/", json.dumps(body), content_type="application/json")
        if response.status_code != 201:
            raise SystemExit(f"bench native: {response.status_code} {response.content[:300]!r}")
    while _admit():
        pass
    return time.perf_counter() - started


def run() -> dict[str, Any]:
    django_setup()
    client = _setup()
    bodies: dict[str, dict[str, Any]] = {
        "plain": {"queue": "hpc", "kind": "training", "name": "bench"} | PLAIN,
        "native": {"queue": "hpc", "kind": "training", "script": SCRIPT},
    }
    _round(client, bodies["plain"])  # warm up both roads
    _round(client, bodies["native"])
    times: dict[str, list[float]] = {"plain": [], "native": []}
    ratios = []
    for r in range(ROUNDS):
        for path in ("plain", "native") if r % 2 == 0 else ("native", "plain"):
            times[path].append(_round(client, bodies[path]))
        ratios.append(times["native"][-1] / times["plain"][-1])
    ratio = statistics.median(ratios)
    for path, spent in times.items():
        print(f"  {path:7} {N / statistics.median(spent):8.1f} submits+admissions per second (median of {ROUNDS})")
    print(f"  native / plain time: {ratio:.3f} (goal <= 1.2)")
    cycles = _array_cycles(client)
    print(f"  a 1,000-element array was admitted in {cycles} scheduling cycles (goal < 5)")
    return {"per_s": {p: N / statistics.median(s) for p, s in times.items()}, "ratio": ratio, "array_cycles": cycles}


def _array_cycles(client: Any) -> int:
    from portal.workloads.models import Workload
    from portal.workloads.states import State

    Workload.objects.all().delete()
    body = {"queue": "hpc", "kind": "batch", "name": "sweep", "command": "true", "array": "0-999",
            "resources": {"gpus": 0, "cpus": 1, "memory_gb": 1}}  # fmt: skip
    response = client.post("/api/v1/workloads/", json.dumps(body), content_type="application/json")
    if response.status_code != 201:
        raise SystemExit(f"bench native: {response.status_code} {response.content[:300]!r}")
    cycles = 0
    while Workload.objects.filter(array_size=0, state=State.PENDING).exists() and cycles < 100:
        _admit()
        cycles += 1
    return cycles
