"""Where a submit's time goes: cProfile over a run of authenticated API submits, and the SQL each one sends.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/gridlane .venv/bin/python -m bench.profile_submit [N]

Runs N submits (default 500) through the whole Django stack in this process (the test client: middleware,
DRF, token, rate limit, services, the response), against the benchmarks' own database, with the kick on. Prints
the statements of one submit and the functions that took the most time, by their own time and cumulatively.
This is how the submit path was taken from 16 statements to 5: the profile showed where the time went, the
statement list what each round trip was for.
"""

from __future__ import annotations

import cProfile
import io
import os
import pstats
import sys

from bench.bench_scheduler import django_setup


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
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 500)
