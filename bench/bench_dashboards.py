"""The team dashboard over 1,000,000 usage samples: queries per render (goal <= 10) and p95 render time
(goal <= 150 ms), against the baseline of reading the same 30 days from the raw samples.

Setup (outside the clock): 1,000 workloads of one team spread over 30 days, 1,000 samples each
(1,000,000 rows, written by PostgreSQL's generate_series), then the worker's rollup over the 30 days.

    dashboard  GET /teams/<team>/?window=30d through Django's test client (session, middleware,
               templates, six figures): what a lead's browser asks for
    raw        one aggregate over the raw samples for the same window (GPU-hours per hour): the
               cheapest query a dashboard without rollups would still have to make
"""

from __future__ import annotations

import statistics
import time
import uuid
from datetime import datetime, timedelta
from typing import Any

from bench.bench_scheduler import django_setup

WORKLOADS = 1000
SAMPLES_PER_WORKLOAD = 1000
DAYS = 30
ROUNDS = 40


def _seed(now: datetime | None = None) -> tuple[Any, Any]:
    """Vision's 1,000,000 samples over the DAYS days before `now` (default: the present), and its lead."""
    from django.contrib.auth import get_user_model
    from django.core.management import call_command
    from django.db import connection
    from django.utils import timezone

    from portal.accounts.models import ResourceGroup
    from portal.queues.models import Queue
    from portal.workloads.models import Workload
    from portal.workloads.states import State

    call_command("flush", interactive=False, verbosity=0)
    call_command("seed_demo", verbosity=0)
    users = list(get_user_model().objects.filter(username__in=["alice", "bob"]))
    vision = ResourceGroup.objects.get(slug="vision")
    queues = list(Queue.objects.all())
    now = now or timezone.now()
    rows = []
    for i in range(WORKLOADS):
        submitted = now - timedelta(days=DAYS) + timedelta(minutes=i * DAYS * 24 * 60 // WORKLOADS)
        started = submitted + timedelta(minutes=i % 90)
        workload = Workload(id=uuid.uuid4(), owner=users[i % 2], group=vision, queue=queues[i % len(queues)],
                            kind="training", name=f"bench-{i}", command="true", gpus_milli=1000 * (1 + i % 4),
                            runtime_limit_s=86400, state=State.SUCCEEDED, submitted_at=submitted,
                            started_at=started, finished_at=started + timedelta(minutes=60 + i % 600))  # fmt: skip
        rows.append(workload)
    Workload.objects.bulk_create(rows, batch_size=500)
    with connection.cursor() as cursor:
        cursor.execute(
            # Samples with utilisation, as a job's own sampler sends them (the column has no database default).
            "INSERT INTO usage_usagesample (workload_id, at, source, gpus_milli, gpu_utilisation) "
            "SELECT w.id, w.started_at + g * interval '36 seconds', 'job', w.gpus_milli, (g * 7919 %% 100) "
            "FROM workloads_workload w, generate_series(0, %s) g WHERE w.name LIKE 'bench-%%'",
            [SAMPLES_PER_WORKLOAD - 1],
        )
        cursor.execute("ANALYZE")
    return vision, users[1] if users[1].username == "bob" else users[0]


def renders(client: Any, url: str, rounds: int, what: str) -> tuple[list[float], int]:
    """GET `url` `rounds` times: each render's milliseconds, and the most queries one took (every answer a 200)."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    times, queries = [], 0
    for _ in range(rounds):
        with CaptureQueriesContext(connection) as ctx:
            t = time.perf_counter()
            response = client.get(url)
            times.append((time.perf_counter() - t) * 1000)
        if response.status_code != 200:
            raise RuntimeError(f"{what} answered {response.status_code}")
        queries = max(queries, len(ctx.captured_queries))
    return times, queries


def run() -> dict[str, Any]:
    import os

    os.environ.setdefault("GRIDLANE_ALLOWED_HOSTS", "127.0.0.1,localhost")
    django_setup()
    from django.db import connection
    from django.test import Client
    from django.utils import timezone

    from portal.usage import rollup
    from portal.usage.models import UsageSample

    vision, lead = _seed()
    samples = UsageSample.objects.count()
    started = time.perf_counter()
    rows = rollup.roll_up(timezone.now() - timedelta(days=DAYS), timezone.now())
    rollup_s = time.perf_counter() - started
    step_started = time.perf_counter()
    rollup.step(timezone.now())
    step_s = time.perf_counter() - step_started

    client = Client(SERVER_NAME="127.0.0.1")
    client.force_login(lead)
    url = f"/teams/{vision.slug}/?window=30d"
    client.get(url)  # warm: templates compiled, connection open
    times, queries = renders(client, url, ROUNDS, "dashboard")
    raw_times = []
    since = timezone.now() - timedelta(days=DAYS)
    for _ in range(5):
        t = time.perf_counter()
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT date_trunc('hour', s.at), sum(s.gpus_milli) FROM usage_usagesample s "
                "JOIN workloads_workload w ON w.id = s.workload_id WHERE w.group_id = %s AND s.at >= %s "
                "GROUP BY 1",
                [vision.pk, since],
            )
            cursor.fetchall()
        raw_times.append((time.perf_counter() - t) * 1000)
    p95 = statistics.quantiles(times, n=20)[-1]
    result = {
        "samples": samples,
        "rollup_rows": rows,
        "rollup_30_days_s": round(rollup_s, 2),
        "worker_step_ms": round(step_s * 1000, 1),
        "dashboard_queries": queries,
        "dashboard_p50_ms": round(statistics.median(times), 1),
        "dashboard_p95_ms": round(p95, 1),
        "raw_samples_query_p50_ms": round(statistics.median(raw_times), 1),
        "goal_queries_le_10": queries <= 10,
        "goal_p95_le_150_ms": p95 <= 150,
    }
    print(
        f"{samples:,} samples; rollup of {DAYS} days: {rows} rows in {rollup_s:.2f} s; "
        f"worker step {step_s * 1000:.1f} ms\n"
        f"dashboard (30 days): {queries} queries, p50 {result['dashboard_p50_ms']} ms, p95 {p95:.1f} ms "
        f"(goal <= 10 queries, p95 <= 150 ms)\n"
        f"raw samples, one aggregate for the same window: p50 {result['raw_samples_query_p50_ms']} ms "
        f"(ratio dashboard p50 / raw {statistics.median(times) / max(statistics.median(raw_times), 1e-9):.2f})"
    )
    return result
