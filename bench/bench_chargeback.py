"""The chargeback page for a month of 1,000,000 usage samples: queries per render (goal <= 10) and p95 render
time (goal <= 200 ms), against the baseline of the same month's totals taken from the raw samples.

Setup (outside the clock): bench_dashboards' seed (1,000 workloads of one team, 1,000 samples each, written by
PostgreSQL's generate_series), placed inside the most recent whole 31-day month, on a fabric priced per GPU-,
CPU- and GB-hour; then the worker's rollup of that month.

    chargeback  GET /teams/<team>/chargeback/?month=YYYY-MM through Django's test client (session, middleware,
                template; totals and the tables per member, queue and fabric): what a lead's browser asks for
    raw         one aggregate over the month's raw samples of the team (GPU-hours, used, below 80 %, cost): the
                cheapest query a page without rollups would still have to make, with none of its breakdowns
"""

from __future__ import annotations

import statistics
import time
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

from bench.bench_dashboards import DAYS, _seed, renders
from bench.bench_scheduler import django_setup

ROUNDS = 40
RAW_ROUNDS = 20
SAMPLE_SECONDS = 36  # bench_dashboards writes one sample per workload every 36 seconds


def last_long_month(now: datetime) -> tuple[datetime, datetime]:
    """The most recent month of 31 days that has ended: 30 days of seeded work, and the hours each workload runs
    after its submission, fit inside it."""
    end = now.astimezone(UTC).replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    while True:
        start = (end - timedelta(days=1)).replace(day=1)
        if (end - start).days == 31:
            return start, end
        end = start


def run() -> dict[str, Any]:
    import os

    os.environ.setdefault("GRIDLANE_ALLOWED_HOSTS", "127.0.0.1,localhost")
    django_setup()
    from django.db import connection
    from django.test import Client
    from django.utils import timezone

    from portal.queues.models import Fabric
    from portal.usage import rollup
    from portal.usage.models import UsageSample
    from portal.workloads.models import Workload

    start, end = last_long_month(timezone.now())
    # Half a day into the month, and the last workload (submitted up to 43 minutes before the seed's `now`,
    # running at most 11 hours) done half a day before it ends.
    vision, lead = _seed(start + timedelta(days=DAYS, hours=12))
    local = Fabric.objects.get(name="local")
    Fabric.objects.filter(pk=local.pk).update(
        gpu_hour_price=Decimal("2.5"), cpu_hour_price=Decimal("0.05"), memory_gb_hour_price=Decimal("0.01")
    )
    Workload.objects.filter(name__startswith="bench-").update(fabric=local)
    samples = UsageSample.objects.filter(at__gte=start, at__lt=end).count()
    started = time.perf_counter()
    rows = rollup.roll_up(start, end)
    rollup_s = time.perf_counter() - started

    client = Client(SERVER_NAME="127.0.0.1")
    client.force_login(lead)
    url = f"/teams/{vision.slug}/chargeback/?month={start:%Y-%m}"
    first = client.get(url)  # warm: templates compiled, connection open
    if first.status_code != 200 or b'class="cost">0.00<' in first.content:
        raise RuntimeError(f"chargeback answered {first.status_code} or cost nothing")
    times, queries = renders(client, url, ROUNDS, "chargeback")
    raw_times = []
    for _ in range(RAW_ROUNDS):
        t = time.perf_counter()
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT sum(s.gpus_milli) / 1000.0 * %s / 3600, "
                "sum(s.gpus_milli * s.gpu_utilisation / 100.0) / 1000.0 * %s / 3600, "
                "sum(s.gpus_milli) FILTER (WHERE s.gpu_utilisation < 80) / 1000.0 * %s / 3600, "
                "sum(s.gpus_milli * coalesce(f.gpu_hour_price, 0)) / 1000.0 * %s / 3600 "
                "FROM usage_usagesample s JOIN workloads_workload w ON w.id = s.workload_id "
                "LEFT JOIN queues_fabric f ON f.id = w.fabric_id "
                "WHERE w.group_id = %s AND s.at >= %s AND s.at < %s",
                [SAMPLE_SECONDS] * 4 + [vision.pk, start, end],
            )
            cursor.fetchall()
        raw_times.append((time.perf_counter() - t) * 1000)
    p50, p95 = statistics.median(times), statistics.quantiles(times, n=20)[-1]
    raw_p50, raw_p95 = statistics.median(raw_times), statistics.quantiles(raw_times, n=20)[-1]
    result = {
        "month": f"{start:%Y-%m}",
        "samples_in_month": samples,
        "rollup_rows": rows,
        "rollup_month_s": round(rollup_s, 2),
        "chargeback_queries": queries,
        "chargeback_p50_ms": round(p50, 1),
        "chargeback_p95_ms": round(p95, 1),
        "raw_samples_query_p50_ms": round(raw_p50, 1),
        "raw_samples_query_p95_ms": round(raw_p95, 1),
        "ratio_p50_chargeback_over_raw": round(p50 / max(raw_p50, 1e-9), 3),
        "ratio_p95_chargeback_over_raw": round(p95 / max(raw_p95, 1e-9), 3),
        "goal_queries_le_10": queries <= 10,
        "goal_p95_le_200_ms": p95 <= 200,
    }
    print(
        f"{samples:,} samples in {start:%Y-%m}; rollup of the month: {rows} rows in {rollup_s:.2f} s\n"
        f"chargeback page: {queries} queries, p50 {p50:.1f} ms, p95 {p95:.1f} ms (goal <= 10 queries, p95 <= 200 ms)\n"
        f"raw samples, one aggregate of the month's totals: 1 query, p50 {raw_p50:.1f} ms, p95 {raw_p95:.1f} ms\n"
        f"ratio chargeback / raw: p50 {result['ratio_p50_chargeback_over_raw']:.3f}, "
        f"p95 {result['ratio_p95_chargeback_over_raw']:.3f}"
    )
    return result
