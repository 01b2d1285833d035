"""Policy as code on a large site: export and plan of 200 teams, 50 queues and 20 fabrics (goal: under 2 s each,
the plan's what-if replay excluded).

Setup (outside the clock): 20 departments of 9 teams each (200 teams in all), every team and department with a
quota on two of 20 fabrics (the departments' holding their teams'), 50 queues open to 20 teams each with two
targets, the three starting tiers and 5 profiles; rows bulk-created.

Timed, each the median of 5 runs: the export (the document's text from the live policy, as GET /api/v1/policy/
answers it, through the API), a plan of the unchanged document (nothing to change; run whole, then undone), and
a plan of one changed quota (what-if off: whatif_days 0).
"""

from __future__ import annotations

import statistics
import time
from typing import Any

from bench.bench_scheduler import django_setup

FABRICS, QUEUES, DEPARTMENTS, TEAMS_PER_DEPARTMENT = 20, 50, 20, 9
GOAL_S = 2.0
RUNS = 5


def _seed() -> Any:
    from django.contrib.auth import get_user_model
    from django.core.management import call_command

    from portal.accounts.models import ResourceGroup
    from portal.queues.models import Fabric, Profile, Queue, QueueTarget, Quota

    call_command("flush", interactive=False, verbosity=0)
    call_command("seed_demo", verbosity=0)
    fabrics = Fabric.objects.bulk_create(
        Fabric(name=f"fabric-{f:02}", kind="local", gpu_flavor="h100", gpus_milli=64_000, cpus_milli=512_000,
               memory_mib=2 * 1024 * 1024, settings={"root": f"/srv/gridlane/fabric-{f:02}"})
        for f in range(FABRICS)
    )  # fmt: skip
    departments = ResourceGroup.objects.bulk_create(
        ResourceGroup(slug=f"dept-{d:02}", name=f"Department {d}") for d in range(DEPARTMENTS)
    )
    teams = ResourceGroup.objects.bulk_create(
        ResourceGroup(slug=f"team-{d:02}-{t}", name=f"Team {d}.{t}", parent=dept, wait_slo_seconds=1800)
        for d, dept in enumerate(departments)
        for t in range(TEAMS_PER_DEPARTMENT)
    )
    quotas = []
    for d, dept in enumerate(departments):
        for fabric in (fabrics[d % FABRICS], fabrics[(d + 1) % FABRICS]):
            quotas.append(Quota(group=dept, fabric=fabric, gpu_reservation_milli=18_000, gpu_limit_milli=48_000))
            quotas += [Quota(group=team, fabric=fabric, gpu_reservation_milli=2000, gpu_limit_milli=8000)
                       for team in teams[d * TEAMS_PER_DEPARTMENT:(d + 1) * TEAMS_PER_DEPARTMENT]]  # fmt: skip
    Quota.objects.bulk_create(quotas)
    queues = Queue.objects.bulk_create(
        Queue(slug=f"queue-{q:02}", name=f"Queue {q}", kinds=["training", "batch"]) for q in range(QUEUES)
    )
    QueueTarget.objects.bulk_create(
        QueueTarget(queue=queue, fabric=fabrics[(q + i) % FABRICS], order=i)
        for q, queue in enumerate(queues)
        for i in range(2)
    )
    through = Queue.allowed_groups.through
    through.objects.bulk_create(
        through(queue_id=queue.pk, resourcegroup_id=teams[(q * 20 + i) % len(teams)].pk)
        for q, queue in enumerate(queues)
        for i in range(20)
    )
    for p in range(5):
        profile = Profile.objects.create(name=f"Size {p}", kinds=["training"], gpus_milli=1000 * (p + 1))
        profile.queues.add(queues[p])
    return get_user_model().objects.get(username="it"), ResourceGroup.objects.count()


def _median(action: Any) -> tuple[float, Any]:
    times, out = [], None
    for _ in range(RUNS):
        started = time.perf_counter()
        out = action()
        times.append(time.perf_counter() - started)
    return statistics.median(times), out


def run() -> dict[str, Any]:
    django_setup()
    from rest_framework.test import APIClient

    from portal.accounts.models import ApiToken
    from portal.policy import apply, document

    it, groups = _seed()
    _, token = ApiToken.issue(it, "bench")
    client = APIClient(SERVER_NAME="127.0.0.1")
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    export_s, answer = _median(lambda: client.get("/api/v1/policy/"))
    if answer.status_code != 200:
        raise RuntimeError(f"export answered {answer.status_code}: {answer.content[:300]!r}")
    text = answer.json()["document"]
    unchanged_s, unchanged = _median(lambda: apply.run(text, commit=False))
    changed_text = text.replace("gpu_reservation: 2  # GPUs", "gpu_reservation: 1  # GPUs", 1)
    body = {"document": changed_text, "whatif_days": 0}
    changed_s, changed = _median(lambda: client.post("/api/v1/policy/plan/", body, format="json"))
    policy = document.live()
    out = {
        "teams": groups,
        "queues": len(policy["queues"]),
        "fabrics": len(policy["fabrics"]),
        "quotas": len(policy["quotas"]),
        "document_lines": text.count("\n"),
        "export_seconds": round(export_s, 3),
        "plan_unchanged_seconds": round(unchanged_s, 3),
        "plan_one_change_seconds": round(changed_s, 3),
        "goal_seconds": GOAL_S,
        "met": max(export_s, unchanged_s, changed_s) < GOAL_S,
    }
    if unchanged[0]["changes"] or len(changed.json()["changes"]) != 1:
        raise RuntimeError(f"unexpected plans: {unchanged[0]['changes'][:3]}, {changed.json()}")
    print(f"policy of {groups} teams, {out['queues']} queues, {out['fabrics']} fabrics, {out['quotas']} quotas "
          f"({out['document_lines']} lines): export {export_s:.3f} s, plan unchanged {unchanged_s:.3f} s, plan with "
          f"one change {changed_s:.3f} s (median of {RUNS}; goal under {GOAL_S} s each)")  # fmt: skip
    return out
