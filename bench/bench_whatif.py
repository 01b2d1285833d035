"""The what-if replay of 10,000 workloads over 30 days (goal: under 60 s), through the task's own path.

Setup (outside the clock): a site of 6 teams on two fabrics (h100: 48 GPUs, a100: 32), each team reserving 4 GPUs
on h100; 10,000 workloads submitted over the last 30 days, more by day than by night, mostly one- and two-GPU
jobs of minutes to hours (about three quarters of the GPUs' hours asked for, so that queues form by day), with
what happened to them (waits, runs, a few still running, waiting or cancelled) bulk-created as rows. Those waits
are drawn at random, not by a scheduler: the "actual" row measures the counting, not a policy.

Timed: services.do_replay, what the django-q2 task runs: load the window (a fixed number of queries), count what
actually happened, replay the current policy, replay a proposed change (16 more GPUs on h100), with its progress
written as it goes. Printed beside how long those 30 days took in reality, and the replay's speed.
"""

from __future__ import annotations

import random
import time
import uuid
from datetime import datetime, timedelta
from typing import Any

from bench.bench_scheduler import django_setup

WORKLOADS = 10_000
DAYS = 30
GOAL_S = 60.0
TEAMS = 6


def _seed() -> Any:
    """The site and its month of work; the IT user who asks."""
    from django.contrib.auth import get_user_model
    from django.core.management import call_command
    from django.utils import timezone

    from portal.accounts.models import Membership, ResourceGroup
    from portal.queues.models import Fabric, Queue, QueueTarget, Quota
    from portal.workloads.models import Workload
    from portal.workloads.states import State

    call_command("flush", interactive=False, verbosity=0)
    call_command("seed_demo", verbosity=0)
    Fabric.objects.filter(name="local").update(enabled=False)
    h100 = Fabric.objects.create(name="h100", kind="slurm", gpus_milli=48_000, cpus_milli=10**6, memory_mib=10**8)
    a100 = Fabric.objects.create(name="a100", kind="kubernetes", gpus_milli=32_000, cpus_milli=10**6,
                                 memory_mib=10**8)  # fmt: skip
    train, notebooks = Queue.objects.get(slug="train"), Queue.objects.get(slug="notebooks")
    Queue.objects.filter(pk=train.pk).update(preemptible=True)
    for order, fabric in enumerate((h100, a100)):
        QueueTarget.objects.create(queue=train, fabric=fabric, order=order + 1)
    QueueTarget.objects.create(queue=notebooks, fabric=a100, order=1)
    users = get_user_model().objects
    teams, people = [], []
    for t in range(TEAMS):
        team = ResourceGroup.objects.create(slug=f"team-{t}", name=f"Team {t}", wait_slo_seconds=3600)
        Quota.objects.create(group=team, fabric=h100, gpu_reservation_milli=4000, gpu_limit_milli=32_000)
        for p in range(4):
            person = users.create(username=f"t{t}-p{p}")
            Membership.objects.create(user=person, group=team, role=Membership.Role.MEMBER)
            people.append((team, person))
        teams.append(team)
    rnd = random.Random(19)
    now = timezone.now()
    start = now - timedelta(days=DAYS)
    rows = []
    for i in range(WORKLOADS):
        # By day (8 to 20 h) three times as many arrivals as by night.
        while True:
            offset = rnd.uniform(0, DAYS * 86400)
            if 8 <= (offset / 3600) % 24 < 20 or rnd.random() < 1 / 3:
                break
        submitted = start + timedelta(seconds=offset)
        team, person = rnd.choice(people)
        notebook = rnd.random() < 0.15
        gpus = rnd.choice([1000] * 6 + [2000] * 2 + [4000, 8000, 500])
        runtime = rnd.choice([600, 1800, 3600, 2 * 3600, 4 * 3600, 8 * 3600])
        waited = rnd.expovariate(1 / 900)
        admitted: datetime | None = submitted + timedelta(seconds=waited)
        started: datetime | None = submitted + timedelta(seconds=waited + 5)
        finished: Any = submitted + timedelta(seconds=waited + 5 + runtime)
        state = State.SUCCEEDED
        if rnd.random() < 0.03:  # cancelled while it waited
            state, admitted, started, finished = State.CANCELLED, None, None, admitted
        if finished is not None and finished > now:
            state, finished = (State.RUNNING, None) if started and started < now else (State.PENDING, None)
            if state == State.PENDING:
                admitted = started = None
        rows.append(Workload(
            id=uuid.uuid4(), owner=person, group=team, queue=notebooks if notebook else train,
            kind="notebook" if notebook else "training", name=f"whatif-{i}", command="true", gpus_milli=gpus,
            runtime_limit_s=int(runtime * 1.5), state=state, submitted_at=submitted, admitted_at=admitted,
            started_at=started, finished_at=finished,
        ))  # fmt: skip
    Workload.objects.bulk_create(rows, batch_size=1000)
    return users.get(username="it")


def run() -> dict[str, Any]:
    django_setup()
    from portal.whatif import services
    from portal.whatif.models import WhatIfRun

    it = _seed()
    change = {"capacity": {"fabric": "h100", "gpus": 64}}
    whatif = WhatIfRun.objects.create(requested_by=it, days=DAYS, change=change)
    started, cpu_started = time.perf_counter(), time.process_time()
    services.do_replay(whatif.pk)
    seconds, cpu_seconds = time.perf_counter() - started, time.process_time() - cpu_started
    whatif.refresh_from_db()
    if whatif.state != WhatIfRun.State.DONE or not whatif.result:
        raise RuntimeError(f"the what-if ended {whatif.state}: {whatif.error}")
    result = whatif.result
    cycles = result["current"]["cycles"] + result["proposed"]["cycles"]
    real_s = DAYS * 86400
    out = {
        "workloads": result["workloads"],
        "days": DAYS,
        "seconds": round(seconds, 2),
        "cpu_seconds": round(cpu_seconds, 2),  # this process's; wall time on a shared machine includes others' turns
        "load_seconds": result["seconds"]["load"],
        "goal_seconds": GOAL_S,
        "met": seconds < GOAL_S,
        "faster_than_real_time": round(real_s / seconds),
        "workloads_replayed_per_second": round(2 * result["workloads"] / seconds),
        "cycles": cycles,
        "cycles_per_second": round(cycles / seconds),
        "current": result["current"]["overall"],
        "proposed": result["proposed"]["overall"],
        "actual": result["actual"]["overall"],
    }
    print(f"what-if over {DAYS} days of {out['workloads']} workloads: {out['seconds']} s "
          f"(goal < {GOAL_S:.0f} s: {'met' if out['met'] else 'MISSED'}), {out['cpu_seconds']} s of CPU; "
          f"loading {out['load_seconds']} s")  # fmt: skip
    print(f"  {DAYS} days in reality: {real_s} s; replayed twice (current policy, proposed) in {out['seconds']} s: "
          f"{out['faster_than_real_time']}x faster than real time")  # fmt: skip
    print(f"  replay speed: {out['workloads_replayed_per_second']} workloads/s, {cycles} cycles "
          f"({out['cycles_per_second']} decide() cycles/s)")  # fmt: skip
    print(f"  {'':10} {'p50 wait':>10} {'p95 wait':>10} {'utilisation':>12} {'preemptions':>12} {'SLO breaches':>13}")
    for key in ("actual", "current", "proposed"):
        o = out[key]
        print(f"  {key:10} {o['p50_wait_s']:>9.0f}s {o['p95_wait_s']:>9.0f}s {o['utilisation']:>12.3f} "
              f"{o['preemptions']:>12} {o['slo_breaches']:>13}")  # fmt: skip
    return out
