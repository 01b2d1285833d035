"""The department dashboard over 1,000,000 usage samples: queries per render (goal <= 10) and p95 render time
(goal <= 150 ms), the team dashboard's budget.

Setup (outside the clock): bench_dashboards' site (1,000 workloads of team vision over 30 days, 1,000 samples
each, rolled up), with vision and fraud made the teams of a department `research` that has quotas of its own.

    department  GET /departments/research/?days=30 through Django's test client, as IT (session, middleware,
                templates): the teams side by side, borrowing now, GPU-hours and cost over 30 days
    api         GET /api/v1/departments/research/usage/?days=30 with a bearer token
"""

from __future__ import annotations

import statistics
from datetime import timedelta
from typing import Any

from bench.bench_dashboards import DAYS, renders
from bench.bench_dashboards import _seed as dashboards_seed
from bench.bench_scheduler import django_setup

ROUNDS = 40


def run() -> dict[str, Any]:
    import os

    os.environ.setdefault("GRIDLANE_ALLOWED_HOSTS", "127.0.0.1,localhost")
    django_setup()
    from django.contrib.auth import get_user_model
    from django.test import Client
    from django.utils import timezone
    from rest_framework.test import APIClient

    from portal.accounts.models import ApiToken, ResourceGroup
    from portal.queues.models import Fabric, Quota
    from portal.usage import rollup
    from portal.usage.models import UsageSample

    dashboards_seed()
    rollup.roll_up(timezone.now() - timedelta(days=DAYS), timezone.now())
    research = ResourceGroup.objects.create(slug="research", name="Research")
    ResourceGroup.objects.filter(slug__in=["vision", "fraud"]).update(parent=research)
    Quota.objects.create(group=research, fabric=Fabric.objects.get(name="local"), gpu_reservation_milli=8000)
    it = get_user_model().objects.get(username="it")
    samples = UsageSample.objects.count()

    page = Client(SERVER_NAME="127.0.0.1")
    page.force_login(it)
    _, token = ApiToken.issue(it, "bench")
    api = APIClient(SERVER_NAME="127.0.0.1")
    api.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    result: dict[str, Any] = {"samples": samples}
    for name, client, url in (("department", page, "/departments/research/?days=30"),
                              ("api", api, "/api/v1/departments/research/usage/?days=30")):  # fmt: skip
        client.get(url)  # warm: templates compiled, connection open
        times, queries = renders(client, url, ROUNDS, name)
        p95 = statistics.quantiles(times, n=20)[-1]
        result |= {f"{name}_queries": queries, f"{name}_p50_ms": round(statistics.median(times), 1),
                   f"{name}_p95_ms": round(p95, 1)}  # fmt: skip
        print(f"{name} (30 days, {samples:,} samples): {queries} queries, p50 {statistics.median(times):.1f} ms, "
              f"p95 {p95:.1f} ms (goal <= 10 queries, p95 <= 150 ms)")  # fmt: skip
    result["met"] = all(result[f"{n}_queries"] <= 10 and result[f"{n}_p95_ms"] <= 150 for n in ("department", "api"))
    return result
