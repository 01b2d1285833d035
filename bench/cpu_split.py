"""Where a submit's CPU goes in the running server: each process group's CPU time per request, read from /proc.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/gridlane .venv/bin/python -m bench.cpu_split [CLASS] [N]

Serves as `make bench submit` does (gunicorn with CLASS of bench_submit.CLASSES, gthread by default, and the
worker running), sends N requests (default 2,000) of the echo, of the floor (bench/echo.py) and of the submit
with `ab -c 16`, waits until every submit is admitted, and prints for each: requests/s, and the milliseconds of
CPU per request that gunicorn's processes, the worker's (its django-q2 cluster included) and PostgreSQL's
backends spent, with the database's transactions per request. On two cores the sum bounds the throughput: 2,000
ms a second over the sum. This is how the split of a submit between web, worker and database was found (with
py-spy --gil on each process, and a backend's own CPU per statement from /proc/<pid>/schedstat, to say which
part of each). The transactions are the database's own count, so they include what Django's query log leaves out
(and the statement tests with it): that is how a health check's `SELECT 1` before every request was found.
"""

from __future__ import annotations

import functools
import sys
from typing import Any

from bench import bench_submit as submit
from bench.bench_scheduler import django_setup


def commits() -> int:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_stat_clear_snapshot()")
        cursor.execute("SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()")
        return int(cursor.fetchone()[0])


def measure(ab: str, url: str, body: dict[str, Any], n: int, token: str, name: str, label: str = "") -> None:
    run = functools.partial(submit.ab_run, ab, url, body, n, token)
    until = functools.partial(submit.wait_admitted, name, n) if token else None
    result = submit.with_cpu(run, n, until, {"transactions": commits})
    split = "  ".join(f"{group} {ms:.2f}" for group, ms in result["cpu_ms_by_group"].items())
    print(f"{label or ('submit' if token else 'echo'):<7} {result['rps']:>7.0f}/s  ms of CPU a request: {split}  "
          f"(sum {result['cpu_ms']:.2f}); {result['transactions']:.1f} transactions a "
          f"request; p50 {result['p50_ms']:.0f} ms, p99 {result['p99_ms']:.0f} ms", flush=True)  # fmt: skip


def main(argv: list[str]) -> int:
    name = argv[0] if argv else "gthread"
    n = int(argv[1]) if len(argv) > 1 else 2000
    ab = submit.ensure_ab()
    django_setup()
    token = submit.cast()
    submit.floor_table()
    env = submit.server_env()
    with submit.worker(env), submit.gunicorn(submit.CLASSES[name], env) as url:
        submit.ab_run(ab, f"{url}/api/v1/workloads/", submit.JOB | {"name": "warm"}, 200, token)
        measure(ab, f"{url}/bench/echo/", {}, n, "", "")
        measure(ab, f"{url}/bench/floor/", submit.JOB, n, "", "", "floor")
        measure(ab, f"{url}/api/v1/workloads/", submit.JOB | {"name": "split"}, n, token, "split")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
