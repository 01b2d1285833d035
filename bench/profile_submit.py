"""Where a submit's time goes: cProfile over a run of authenticated API submits, and the SQL each one sends.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/gridlane .venv/bin/python -m bench.profile_submit [N]
    DATABASE_URL=... .venv/bin/python -m bench.profile_submit bulk [N]

Runs N submits (default 500) through the whole Django stack in this process (the test client: middleware,
DRF, token, rate limit, services, the response), against the benchmarks' own database, with the kick on. Prints
the statements of one submit and the functions that took the most time, by their own time and cumulatively.
This is how the submit path was taken from 16 statements to 5: the profile showed where the time went, the
statement list what each round trip was for.

`bulk` profiles the bench's bulk row instead: one request of N workloads (default 1,000), then the worker's
admission of all of them (tasks.admit, as a kick runs it), each timed and profiled on its own, with the
statements each sent.
"""

from __future__ import annotations

import cProfile
import io
import os
import pstats
import sys
import time
from typing import Any

from bench.bench_scheduler import django_setup


def profiled(what: str, run: Any, top: int = 60) -> None:
    """Run `run()` under cProfile and a statement capture; print its time, statements and profile."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    profile = cProfile.Profile()
    with CaptureQueriesContext(connection) as captured:
        started = time.perf_counter()
        profile.enable()
        run()
        profile.disable()
        seconds = time.perf_counter() - started
    print(f"\n=== {what}: {seconds * 1000:.0f} ms (profiled), {len(captured.captured_queries)} statements")
    for q in captured.captured_queries[:40]:
        print(f"  {q['time']}s  {q['sql'][:150]}")
    for order in ("tottime", "cumulative"):
        out = io.StringIO()
        pstats.Stats(profile, stream=out).sort_stats(order).print_stats(top)
        print(f"--- {what}, by {order}")
        print("\n".join(line for line in out.getvalue().splitlines() if line.strip())[:6000])


def bulk(n: int) -> None:
    """One bulk request of n workloads, then their admission, as the bench's bulk row measures them."""
    django_setup()
    from django.conf import settings
    from rest_framework.test import APIClient

    from bench.bench_submit import JOB, cast
    from portal.worker import tasks
    from portal.workloads.models import Workload

    settings.GRIDLANE_KICK_WORKER = False  # the admission runs here, profiled, instead of in a worker
    settings.ALLOWED_HOSTS = ["*"]
    token = cast()
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    client.post("/api/v1/workloads/bulk/", {"items": [JOB | {"name": "warm"}] * 10}, format="json")  # imports
    tasks.admit()
    answers = []
    profiled(f"bulk submit of {n}", lambda: answers.append(
        client.post("/api/v1/workloads/bulk/", {"items": [JOB | {"name": "bulk"}] * n}, format="json")
    ))  # fmt: skip
    if answers[0].status_code != 201:
        raise SystemExit(f"bulk: {answers[0].status_code} {answers[0].content[:300]!r}")
    profiled(f"admission of {n}", tasks.admit)
    admitted = Workload.objects.filter(name="bulk", admitted_at__isnull=False).count()
    print(f"\n{admitted} of {n} admitted")


def main(n: int) -> None:
    django_setup()
    os.environ["GRIDLANE_KICK_WORKER"] = "1"
    from django.conf import settings
    from django.db import connection
    from django.test.utils import CaptureQueriesContext
    from rest_framework.test import APIClient

    from bench.bench_submit import JOB, cast

    settings.GRIDLANE_KICK_WORKER = True
    settings.ALLOWED_HOSTS = ["*"]
    token = cast()
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    for i in range(20):  # warm: imports, the token's use this minute, the rate window
        client.post("/api/v1/workloads/", JOB | {"name": f"warm-{i}"}, format="json")
    with CaptureQueriesContext(connection) as one:
        response = client.post("/api/v1/workloads/", JOB | {"name": "counted"}, format="json")
    if response.status_code != 201:
        raise SystemExit(f"submit: {response.status_code} {response.content[:300]!r}")
    print(f"one submit: {len(one.captured_queries)} statements")
    for q in one.captured_queries:
        print(f"  {q['time']}s  {q['sql'][:150]}")
    profile = cProfile.Profile()
    profile.enable()
    for i in range(n):
        client.post("/api/v1/workloads/", JOB | {"name": f"p-{i}"}, format="json")
    profile.disable()
    for order in ("tottime", "cumulative"):
        out = io.StringIO()
        pstats.Stats(profile, stream=out).sort_stats(order).print_stats(25)
        print(f"\n--- {n} submits, by {order}")
        print("\n".join(line for line in out.getvalue().splitlines() if line.strip())[:6000])


if __name__ == "__main__":
    if sys.argv[1:2] == ["bulk"]:
        bulk(int(sys.argv[2]) if len(sys.argv) > 2 else 1000)
    else:
        main(int(sys.argv[1]) if len(sys.argv) > 1 else 500)
