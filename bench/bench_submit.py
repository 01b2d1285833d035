"""Submissions through the API as production serves them: gunicorn on this machine's cores, the worker running.

    echo      bench/echo.py, a bare Django REST framework POST view answering {}: the framework's floor
    floor     the echo that also records its body, one INSERT committed: the floor of any durable submit
    submit    POST /api/v1/workloads/ with a bearer token: authenticated, rate-limited, validated, recorded, kicked
              (same gunicorn, same worker settings, same `ab -c 16`, in rounds that rotate the three)

for each gunicorn worker class (sync, gthread, uvicorn's ASGI worker); then, under the first class:

    bulk      1,000 workloads in one POST /api/v1/workloads/bulk/, from the request to all 1,000 admitted (the
              median of three, on a server that has served bulk requests before)
    naive     the same 1,000 as one request each (ab -c 16), from the first request to all admitted
    lone      one submit at a time on an idle system: submitted_at -> admitted_at, p50 and p95

The workloads go to a queue on an agent fabric with no agents: the worker admits them and makes them claimable
(its whole road inside the portal), and nothing runs on the two cores the server needs. `ab` comes from Debian's
apache2-utils, installed here when it is missing. The worker is `manage.py gridlane_worker`, as deployed.
GRIDLANE_BENCH_CLASSES (e.g. "sync") and GRIDLANE_BENCH_REQUESTS narrow a run.
"""

from __future__ import annotations

import functools
import json
import os
import re
import runpy
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from bench.bench_scheduler import django_setup

ROOT = Path(__file__).resolve().parents[1]
VENV_BIN = Path(sys.executable).parent
REQUESTS = int(os.environ.get("GRIDLANE_BENCH_REQUESTS", "2000"))
CONCURRENCY = 16
ROUNDS = 2
BULK = 1000
BULK_TRIALS = 3
LONE = 40
# gunicorn on two cores: processes, or processes with threads, or ASGI processes (design: worker class and
# count are read from the environment in deploy/gunicorn.conf.py; these are the candidates measured). sync runs
# one process a core (two gave 8-28 % more submits/s than four, side by side: fewer processes taking turns on
# the cores beside the database and the worker); gthread the processes and threads that file gives (what a site
# runs unless it sets them).
SHIPPED = runpy.run_path(str(ROOT / "deploy" / "gunicorn.conf.py"))
CLASSES: dict[str, list[str]] = {
    "sync": ["bench.wsgi:application", "--worker-class", "sync", "--workers", str(os.cpu_count() or 2)],
    "gthread": [
        "bench.wsgi:application",
        "--worker-class",
        "gthread",
        "--workers",
        str(SHIPPED["workers"]),
        "--threads",
        str(SHIPPED["threads"]),
    ],
    "uvicorn": [
        "bench.asgi:application",
        "--worker-class",
        "uvicorn_worker.UvicornWorker",
        "--workers",
        "4",
        "--env",
        "GRIDLANE_BENCH_ASGI=1",
    ],
}
JOB = {"queue": "burst", "kind": "batch", "command": "true", "resources": {"gpus": 0, "cpus": 0.001, "memory_gb": 0.1}}


def run() -> dict[str, Any]:
    ab = ensure_ab()
    django_setup()
    token = cast()
    floor_table()
    env = server_env()
    results: dict[str, Any] = {"requests": REQUESTS, "concurrency": CONCURRENCY, "classes": {}}
    chosen = os.environ.get("GRIDLANE_BENCH_CLASSES", ",".join(CLASSES)).split(",")  # e.g. "sync" alone
    with worker(env):
        for name, argv in ((n, CLASSES[n]) for n in chosen):
            with gunicorn(argv, env) as url:
                results["classes"][name] = paired(ab, url, token)
            print(f"{name}: {results['classes'][name]}", flush=True)
            clear()
        with gunicorn(CLASSES["sync"], env) as url:
            results["bulk"] = bulk(ab, url, token)
            print(f"bulk: {results['bulk']}", flush=True)
            clear()
            results["lone"] = lone(url, token)
    report(results)
    return results


# --- Set-up -----------------------------------------------------------------------------------------------


def ensure_ab() -> str:
    """ApacheBench, from Debian's apache2-utils when it is not installed yet."""
    found = shutil.which("ab")
    if found is None:
        print("bench submit: installing apache2-utils (ab)", flush=True)
        install = ["apt-get", "install", "-y", "-q", "apache2-utils"]
        if subprocess.run(install, capture_output=True).returncode != 0:
            subprocess.run(["apt-get", "update", "-q"], capture_output=True, check=True)  # noqa: S607
            subprocess.run(install, capture_output=True, check=True)
        found = shutil.which("ab")
    if found is None:
        raise SystemExit("bench submit: ab is not installed and apache2-utils could not be installed")
    return found


def cast() -> str:
    """The demo cast, an agent fabric `burst` (no agents: admitted work waits to be claimed) behind a queue
    `burst` open to alice's team, declared big enough for everything the bench submits. Returns alice's token."""
    from django.contrib.auth import get_user_model
    from django.core.management import call_command
    from django.utils import timezone

    from portal.accounts.models import ApiToken, ResourceGroup
    from portal.queues.models import Fabric, Queue, QueueTarget

    call_command("flush", interactive=False, verbosity=0)
    call_command("seed_demo", stdout=open(os.devnull, "w"))  # noqa: SIM115
    big = {"gpus_milli": 0, "cpus_milli": 10**9, "memory_mib": 10**10}
    fabric = Fabric.objects.create(name="burst", kind="agent", **big)
    # As if it had just reported that much: the capacity step asks it again only after GRIDLANE_CAPACITY_SECONDS.
    Fabric.objects.filter(pk=fabric.pk).update(
        observed_gpus_milli=0, observed_cpus_milli=10**9, observed_memory_mib=10**10, observed_at=timezone.now()
    )
    queue = Queue.objects.create(slug="burst", name="Burst", kinds=["batch"], default_runtime_minutes=10)
    queue.allowed_groups.add(ResourceGroup.objects.get(slug="vision"))
    QueueTarget.objects.create(queue=queue, fabric=fabric)
    _, token = ApiToken.issue(get_user_model().objects.get(username="alice"), "bench")
    return token


def server_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    return env | {
        "DJANGO_SETTINGS_MODULE": "bench.settings",
        "GRIDLANE_KICK_WORKER": "1",
        "GRIDLANE_CAPACITY_SECONDS": "3600",
        "GRIDLANE_SUBMIT_RATE_LIMIT": "100000000",
        "GRIDLANE_LOG_LEVEL": "WARNING",
        "PYTHONPATH": str(ROOT),
    }


@contextmanager
def worker(env: dict[str, str]) -> Iterator[None]:
    log = tempfile.TemporaryFile()  # noqa: SIM115 (lives as long as the worker)
    proc = subprocess.Popen(
        [sys.executable, str(ROOT / "manage.py"), "gridlane_worker"], env=env, cwd=ROOT, stdout=log, stderr=log,
        start_new_session=True,
    )  # fmt: skip
    time.sleep(3)  # the django-q2 cluster, the first cycle and the listener are up
    try:
        yield
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def gunicorn(argv: list[str], env: dict[str, str]) -> Iterator[str]:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen(
        [str(VENV_BIN / "gunicorn"), *argv, "--bind", f"127.0.0.1:{port}", "--log-level", "warning"],
        env=env, cwd=ROOT, start_new_session=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                post(f"{url}/bench/echo/", {})
                break
            except OSError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise SystemExit(f"bench submit: gunicorn {' '.join(argv)} did not start") from None
                time.sleep(0.2)
        yield url
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)


def post(url: str, body: Any, token: str = "") -> tuple[int, Any]:
    request = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST")  # noqa: S310 (loopback)
    request.add_header("Content-Type", "application/json")
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    with urllib.request.urlopen(request, timeout=120) as response:  # noqa: S310
        return response.status, json.loads(response.read() or b"null")


def floor_table() -> None:
    """The floor view's table (bench/echo.py), empty: created here, outside the portal's migrations."""
    from django.db import connection

    from bench.echo import FLOOR_TABLE

    with connection.cursor() as cursor:
        cursor.execute(f"CREATE TABLE IF NOT EXISTS {FLOOR_TABLE} (id bigserial PRIMARY KEY, body jsonb NOT NULL)")
        cursor.execute(f"TRUNCATE {FLOOR_TABLE}")


def clear() -> None:
    """Finish what a measurement left, so that the next one starts with an empty line (as a real site would
    between bursts): every unfinished workload is marked cancelled, and the database vacuumed.

    The vacuum is what autovacuum does on a site's database between bursts; a test machine's may have it off,
    and then every version a burst left behind (each workload's moves write a new row and new entries in each
    of its indexes) stayed in the way of the worker's reads of the active workloads for the rest of the run:
    that made each measurement dearer than the one before it (PostgreSQL's CPU a submit 0.89 ms in the first
    of ten measurements, 1.41 in the last), and a class measured later pay for the ones before it."""
    from django.db import OperationalError, connection
    from django.utils import timezone

    from portal.workloads.models import Workload
    from portal.workloads.states import FINISHED

    for attempt in range(5):
        try:
            Workload.objects.exclude(state__in=FINISHED).update(state="cancelled", finished_at=timezone.now())
            break
        except OperationalError:  # a deadlock with the worker, still moving some of them: once more
            if attempt == 4:
                raise
            time.sleep(0.5)
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("VACUUM (ANALYZE)")


# --- Measurements -----------------------------------------------------------------------------------------


def ab_run(ab: str, url: str, body: dict[str, Any], n: int, token: str = "") -> dict[str, float]:
    """ab's throughput and latency percentiles; every answer must be a 2xx."""
    with tempfile.NamedTemporaryFile("w", suffix=".json") as file:
        file.write(json.dumps(body))
        file.flush()
        argv = [ab, "-q", "-l", "-n", str(n), "-c", str(CONCURRENCY), "-p", file.name, "-T", "application/json"]
        if token:
            argv += ["-H", f"Authorization: Bearer {token}"]
        return ab_measure([*argv, url], n)


def ab_measure(argv: list[str], n: int) -> dict[str, float]:
    """Run ab (argv ends with the URL): its throughput and latency percentiles. More than a tenth of answers
    that are not 2xx, or any failed request, stops the bench."""
    url = argv[-1]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=600).stdout
    bad = re.search(r"Non-2xx responses:\s+(\d+)", out)
    failed = int(re.search(r"Failed requests:\s+(\d+)", out)[1])  # type: ignore[index]
    if failed or (bad and int(bad[1]) > n // 10):
        raise RuntimeError(f"ab against {url}: {failed} failed, {bad[1] if bad else 0} non-2xx\n{out[-800:]}")
    percent = {int(p): float(ms) for p, ms in re.findall(r"^\s+(\d+)%\s+(\d+)", out, re.M)}
    return {
        "non_2xx": int(bad[1]) if bad else 0,  # reported beside the numbers; more than a tenth stops the bench
        "rps": float(re.search(r"Requests per second:\s+([\d.]+)", out)[1]),  # type: ignore[index]
        "p50_ms": percent[50],
        "p99_ms": percent[99],
    }


def paired(ab: str, url: str, token: str) -> dict[str, Any]:
    """Echo, floor and submit in rotating order, ROUNDS each; each ratio is the median of the rounds' ratios. Each
    run also reports the CPU a request of the server, the database and the worker together (a submit's until
    the worker has admitted all of it): on a machine whose speed swings from minute to minute, the submit's CPU
    over the echo's measured beside it is the steadier reading of what a submit costs."""
    ab_run(ab, f"{url}/bench/echo/", {}, 200)  # warm every worker up
    ab_run(ab, f"{url}/bench/floor/", JOB, 200)
    ab_run(ab, f"{url}/api/v1/workloads/", JOB | {"name": "warm"}, 200, token)
    runs: dict[str, list[dict[str, Any]]] = {"echo": [], "floor": [], "submit": []}
    for r in range(ROUNDS):
        steps = list(runs)
        for what in steps[r % 3 :] + steps[: r % 3]:
            if what == "echo":
                runs[what].append(with_cpu(lambda: ab_run(ab, f"{url}/bench/echo/", {}, REQUESTS), REQUESTS))
            elif what == "floor":
                runs[what].append(with_cpu(lambda: ab_run(ab, f"{url}/bench/floor/", JOB, REQUESTS), REQUESTS))
            else:
                clear()  # each submit round starts from an empty line, whatever ran before it
                name = f"r{r}-{time.monotonic_ns()}"  # its own: wait_admitted counts this run's alone
                run = functools.partial(ab_run, ab, f"{url}/api/v1/workloads/", JOB | {"name": name}, REQUESTS, token)
                runs[what].append(with_cpu(run, REQUESTS, functools.partial(wait_admitted, name, REQUESTS)))
    echo, floor, submit = runs["echo"], runs["floor"], runs["submit"]

    def ratio(a: list[dict[str, Any]], b: list[dict[str, Any]], key: str) -> float:
        return float(statistics.median(x[key] / y[key] for x, y in zip(a, b, strict=True)))

    # On CPUs that the run keeps busy, requests/s go as 1 / CPU a request: a round whose submit spent `cpu_ms`, of
    # which `web` in gunicorn, would have reached ratio x cpu_ms / web had the database and the worker cost
    # nothing. The bound the web processes alone set on the ratio.
    web_alone = statistics.median(
        s["rps"] / e["rps"] * s["cpu_ms"] / s["cpu_ms_by_group"]["gunicorn"]
        for s, e in zip(submit, echo, strict=True)
    ) if all(s["cpu_ms_by_group"].get("gunicorn") for s in submit) else None  # fmt: skip

    return {
        "echo_rps": round(max(e["rps"] for e in echo), 1),
        "floor_rps": round(max(f["rps"] for f in floor), 1),
        "submit_rps": round(max(s["rps"] for s in submit), 1),
        "submit_p50_ms": min(s["p50_ms"] for s in submit),
        "submit_p99_ms": min(s["p99_ms"] for s in submit),
        "echo_p99_ms": min(e["p99_ms"] for e in echo),
        "submit_vs_echo": round(ratio(submit, echo, "rps"), 3),
        "floor_vs_echo": round(ratio(floor, echo, "rps"), 3),
        "submit_vs_floor": round(ratio(submit, floor, "rps"), 3),
        "echo_cpu_ms": round(statistics.median(e["cpu_ms"] for e in echo), 2),
        "floor_cpu_ms": round(statistics.median(f["cpu_ms"] for f in floor), 2),
        "submit_cpu_ms": round(statistics.median(s["cpu_ms"] for s in submit), 2),
        "submit_cpu_vs_echo": round(ratio(submit, echo, "cpu_ms"), 1) if all(e["cpu_ms"] > 0 for e in echo) else None,
        "submit_cpu_ms_by_group": {
            group: round(statistics.median(s["cpu_ms_by_group"].get(group, 0.0) for s in submit), 2)
            for group in ("gunicorn", "postgres", "worker")
        },
        "web_alone_vs_echo": None if web_alone is None else round(web_alone, 3),
        "non_2xx": sum(x["non_2xx"] for x in [*echo, *floor, *submit]),
    }


TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds() -> dict[tuple[str, str], float]:
    """CPU seconds (user + system) of every process of interest, by (group, pid): gunicorn's, PostgreSQL's and
    the worker's (its django-q2 cluster included)."""
    out = {}
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            command = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            fields = (proc / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:  # it ended meanwhile
            continue
        group = (
            "postgres" if "postgres" in command
            else "gunicorn" if "gunicorn" in command
            else "worker" if "gridlane_worker" in command or "qcluster" in command
            else ""
        )  # fmt: skip
        if group:
            out[(group, proc.name)] = (int(fields[11]) + int(fields[12])) / TICK
    return out


def cpu_spent(before: dict[tuple[str, str], float], after: dict[tuple[str, str], float]) -> dict[str, float]:
    """CPU seconds each group spent between two readings of cpu_seconds()."""
    spent: dict[str, float] = {}
    for (group, pid), seconds in after.items():
        spent[group] = spent.get(group, 0.0) + seconds - before.get((group, pid), 0.0)
    return spent


def with_cpu(run: Any, n: int, until: Any = None, counters: dict[str, Any] | None = None) -> dict[str, Any]:
    """run()'s result with the CPU a request of every process of interest (`cpu_ms`, and `cpu_ms_by_group`),
    from its start until until() returns (when given), after a second for what the last run set going to end.
    `counters` (name -> a function reading one) are read beside the CPU; each one's change a request is added
    under its name."""
    time.sleep(1)
    counters = counters or {}
    before, counted = cpu_seconds(), {name: read() for name, read in counters.items()}
    result = dict(run())
    if until is not None:
        until()
    spent = cpu_spent(before, cpu_seconds())
    result |= {name: (read() - counted[name]) / n for name, read in counters.items()}
    result["cpu_ms_by_group"] = {group: seconds * 1000 / n for group, seconds in sorted(spent.items())}
    result["cpu_ms"] = sum(spent.values()) * 1000 / n
    return result


def wait_admitted(name: str, n: int, timeout: float = 120) -> float:
    """perf_counter() when n workloads called `name` have all been admitted."""
    from portal.workloads.models import Workload

    admitted = Workload.objects.filter(name=name, admitted_at__isnull=False)
    deadline = time.monotonic() + timeout
    while admitted.count() < n:
        if time.monotonic() > deadline:
            raise RuntimeError(f"only {admitted.count()} of {n} {name!r} workloads admitted in {timeout:.0f} s")
        time.sleep(0.005)
    return time.perf_counter()


def bulk(ab: str, url: str, token: str) -> dict[str, Any]:
    """One request of 1,000 vs 1,000 requests of one, each from its start to its last admission. The server is
    warmed first (every process has served a bulk request: a fresh process loads the API's modules on its first
    request, which no site's server pays for each burst); the bulk row is the median of BULK_TRIALS."""
    try:
        code, _ = post(f"{url}/api/v1/workloads/bulk/", {"items": [JOB | {"name": "bulk-warm"}]}, token)
    except urllib.error.HTTPError as error:  # a portal without the bulk endpoint (the baseline's)
        if error.code not in (404, 405):
            raise
        code = error.code
    has_bulk = code == 201
    if has_bulk:
        ab_run(ab, f"{url}/api/v1/workloads/bulk/", {"items": [JOB | {"name": "bulk-warm"}] * 10}, 40, token)
        wait_admitted("bulk-warm", 401)
    clear()
    trials = [_bulk_once(url, token, f"bulk{t}") for t in range(BULK_TRIALS)] if has_bulk else []
    naive_started = time.perf_counter()
    ab_run(ab, f"{url}/api/v1/workloads/", JOB | {"name": "naive"}, BULK, token)
    naive_created = time.perf_counter()
    naive_done = wait_admitted("naive", BULK)
    return {
        "bulk_created_per_s": round(statistics.median(c for c, _ in trials), 1) if has_bulk else None,
        "bulk_admitted_per_s": round(statistics.median(a for _, a in trials), 1) if has_bulk else None,
        "bulk_trials": trials,
        "naive_created_per_s": round(BULK / (naive_created - naive_started), 1),
        "naive_admitted_per_s": round(BULK / (naive_done - naive_started), 1),
    }


def _bulk_once(url: str, token: str, name: str) -> tuple[float, float]:
    """Workloads a second of one bulk request of BULK: (created, admitted), from the request's start."""
    time.sleep(1)  # what the last one set going (its dispatch, a sync) is over
    started = time.perf_counter()
    code, answer = post(f"{url}/api/v1/workloads/bulk/", {"items": [JOB | {"name": name}] * BULK}, token)
    created = time.perf_counter()
    if code != 201 or len(answer["items"]) != BULK:
        raise RuntimeError(f"bulk: {code}")
    done = wait_admitted(name, BULK)
    clear()
    return round(BULK / (created - started), 1), round(BULK / (done - started), 1)


def lone(url: str, token: str) -> dict[str, Any]:
    """One submit at a time, the system idle between them: submitted_at -> admitted_at."""
    from portal.workloads.models import Workload

    for _ in range(LONE):
        post(f"{url}/api/v1/workloads/", JOB | {"name": "lone"}, token)
        time.sleep(0.25)
    wait_admitted("lone", LONE)
    waits = sorted(
        (w.admitted_at - w.submitted_at).total_seconds() * 1000
        for w in Workload.objects.filter(name="lone")
        if w.admitted_at is not None
    )
    return {"p50_ms": round(statistics.median(waits), 1), "p95_ms": round(waits[int(0.95 * (len(waits) - 1))], 1)}


def report(results: dict[str, Any]) -> None:
    print(f"\nsubmit vs echo, gunicorn on {os.cpu_count()} CPUs, ab -n {REQUESTS} -c {CONCURRENCY}, worker running:")
    print(f"  {'class':<8} {'echo req/s':>10} {'submit/s':>9} {'ratio':>6} {'p50 ms':>7} {'p99 ms':>7} {'non-2xx':>7}"
          f"  {'CPU ms a request, echo / submit (ratio)':>40}")  # fmt: skip
    for name, r in results["classes"].items():
        cpu = f"{r['echo_cpu_ms']:.2f} / {r['submit_cpu_ms']:.2f} ({r['submit_cpu_vs_echo']}x)"
        print(f"  {name:<8} {r['echo_rps']:>10.0f} {r['submit_rps']:>9.0f} {r['submit_vs_echo']:>5.2f}x "
              f"{r['submit_p50_ms']:>7.0f} {r['submit_p99_ms']:>7.0f} {r['non_2xx']:>7}  {cpu:>40}")  # fmt: skip
    best = max(results["classes"].values(), key=lambda r: r["submit_rps"])
    met = best["submit_vs_echo"] >= 0.25 and best["submit_rps"] >= 300 and best["submit_p99_ms"] <= 100
    print(f"  goal >= 0.25x the echo, >= 300 submits/s, p99 <= 100 ms (best class): {'met' if met else 'NOT met'}")
    print("  a submit's CPU by process (medians), and the ratio the web processes alone would allow (were the database")
    print("  and the worker free):")
    for name, r in results["classes"].items():
        split = r["submit_cpu_ms_by_group"]
        alone = "-" if r["web_alone_vs_echo"] is None else f"{r['web_alone_vs_echo']:.2f}x"
        print(f"  {name:<8} web {split['gunicorn']:.2f}, database {split['postgres']:.2f}, "
              f"worker {split['worker']:.2f} ms; the web alone: {alone}")  # fmt: skip
    print("  the floor (the echo plus one committed INSERT of its body; no token, checks or worker), beside them:")
    for name, r in results["classes"].items():
        print(f"  {name:<8} floor {r['floor_rps']:.0f} req/s = {r['floor_vs_echo']:.2f}x the echo, CPU "
              f"{r['floor_cpu_ms']:.2f} ms a request; the submit = {r['submit_vs_floor']:.2f}x the floor")  # fmt: skip
    b = results["bulk"]
    if b["bulk_admitted_per_s"] is None:
        print(f"bulk: no bulk endpoint; one request each {b['naive_admitted_per_s']:.0f} admitted/s")
    else:
        gain = b["bulk_admitted_per_s"] / b["naive_admitted_per_s"]
        print(f"bulk, {BULK} workloads: one request {b['bulk_admitted_per_s']:.0f} admitted/s, median of {BULK_TRIALS} "
              f"(created {b['bulk_created_per_s']:.0f}/s); one request each {b['naive_admitted_per_s']:.0f} admitted/s "
              f"(created {b['naive_created_per_s']:.0f}/s); {gain:.1f}x; "
              f"goal >= 3000/s: {'met' if b['bulk_admitted_per_s'] >= 3000 else 'NOT met'}")  # fmt: skip
    lone_ = results["lone"]
    print(f"lone submit -> admitted, {LONE} submits: p50 {lone_['p50_ms']:.0f} ms, p95 {lone_['p95_ms']:.0f} ms "
          f"(goal p50 <= 50 ms: {'met' if lone_['p50_ms'] <= 50 else 'NOT met'})")  # fmt: skip
    print(f"load average {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    print(json.dumps(run(), indent=2))
