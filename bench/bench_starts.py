"""The whole road to running: 1,000 workloads through the API until the fabric has started every one.

    local     a queue on the local fabric (fabrics/local/: a supervisor per dispatch on this host)
    agents    a queue on an agent fabric served by two real `gridlane agent` processes (as bench_agent runs them)

each fed two ways, side by side in one run:

    bulk      the 1,000 in one POST /api/v1/workloads/bulk/
    naive     one POST /api/v1/workloads/ each (ab -c 16), the baseline

starts/s = 1,000 / (first request -> the 1,000th workload with a start recorded by the worker's sync). The
workloads run `true`, so that 1,000 processes never live at once on a two-core machine; one that ran and ended
between two polls still has its start recorded. Served as deployed: gunicorn (threads, so that the agents'
long polls do not hold every worker) and `manage.py gridlane_worker` at its normal cadence.

Where the time goes: bench/profile_starts.py (cProfile of the worker's admit, dispatch and sync over the same road).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from bench.bench_scheduler import django_setup
from bench.bench_submit import ab_run, clear, ensure_ab, gunicorn, post, server_env, worker

ROOT = Path(__file__).resolve().parents[1]
N = int(os.environ.get("GRIDLANE_BENCH_STARTS", "1000"))
GOAL = 200.0
SERVER = ["bench.wsgi:application", "--worker-class", "gthread", "--workers", "2", "--threads", "8"]
AGENT_SLOTS = 64
JOB = {"kind": "batch", "command": "true", "resources": {"gpus": 0, "cpus": 0.001, "memory_gb": 0.01}}


def run() -> dict[str, Any]:
    ab = ensure_ab()
    django_setup()
    with tempfile.TemporaryDirectory() as work:
        token, agent_token = cast(work)
        env = server_env()
        results: dict[str, Any] = {"workloads": N}
        with worker(env), gunicorn(SERVER, env) as url:
            results["local"] = {way: road(ab, url, token, "local", way) for way in ("bulk", "naive")}
            with agents(url, agent_token, work):
                results["agents"] = {way: road(ab, url, token, "agents", way) for way in ("bulk", "naive")}
    report(results)
    return results


def cast(work: str) -> tuple[str, str]:
    """The demo cast, a local fabric and an agent fabric each behind a queue of its own open to alice's team,
    big enough for everything the bench submits. Returns alice's token and the agents' token."""
    from django.contrib.auth import get_user_model
    from django.core.management import call_command
    from django.utils import timezone

    from portal.accounts.models import ApiToken, ResourceGroup
    from portal.agents import services
    from portal.queues.models import Fabric, Queue, QueueTarget

    call_command("flush", interactive=False, verbosity=0)
    call_command("seed_demo", stdout=open(os.devnull, "w"))  # noqa: SIM115
    vision = ResourceGroup.objects.get(slug="vision")
    users = get_user_model().objects
    big = {"gpus_milli": 0, "cpus_milli": 10**9, "memory_mib": 10**10}
    local = Fabric.objects.create(name="here", kind="local", settings={"root": f"{work}/local"}, **big)
    hosts = Fabric.objects.create(name="hosts", kind="agent", **big)
    # As if each had just reported its capacity: the capacity step asks again only after GRIDLANE_CAPACITY_SECONDS.
    Fabric.objects.filter(pk=local.pk).update(observed_gpus_milli=0, observed_cpus_milli=10**9,
                                              observed_memory_mib=10**10, observed_at=timezone.now())  # fmt: skip
    Fabric.objects.filter(pk=hosts.pk).update(observed_gpus_milli=0, observed_cpus_milli=10**9,
                                              observed_memory_mib=10**10, observed_at=timezone.now())  # fmt: skip
    for slug, fabric in (("local", local), ("agents", hosts)):
        queue = Queue.objects.create(slug=slug, name=slug, kinds=["batch"], default_runtime_minutes=10)
        queue.allowed_groups.add(vision)
        QueueTarget.objects.create(queue=queue, fabric=fabric)
    _, token = ApiToken.issue(users.get(username="alice"), "bench")
    _, agent_token = services.enroll(hosts, "bench-agents", vision, by=users.get(username="it"))
    return token, agent_token


@contextmanager
def agents(url: str, token: str, work: str) -> Iterator[None]:
    """Two `gridlane agent` processes serving queue `agents`, registered and long-polling."""
    procs = []
    for name in ("bench-1", "bench-2"):
        argv = [sys.executable, "-m", "gridlane_cli.main", "--server", url, "--token", token, "agent", "--name", name,
                "--queue", "agents", "--slots", str(AGENT_SLOTS), "--workdir", f"{work}/{name}",
                "--nvidia-smi", f"{work}/none"]  # fmt: skip
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        procs.append(subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env,
                                      start_new_session=True))  # fmt: skip
    time.sleep(3)  # both registered and long-polling
    try:
        yield
    finally:
        for proc in procs:
            os.killpg(proc.pid, signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)


def road(ab: str, url: str, token: str, queue: str, way: str, timeout: float = 600) -> dict[str, Any]:
    """Submit N workloads to `queue` (`bulk`: one request; `naive`: one request each) and wait until every one
    has started: the rate from the first request to the last start, and to the last admission."""
    from portal.workloads.models import Workload

    name = f"{queue}-{way}"
    body = JOB | {"queue": queue, "name": name}
    started = time.perf_counter()
    if way == "bulk":
        try:
            code, _ = post(f"{url}/api/v1/workloads/bulk/", {"items": [body] * N}, token)
        except urllib.error.HTTPError as error:
            raise RuntimeError(f"bulk submit to {queue}: {error.code} {error.read()[:300]!r}") from None
        if code != 201:
            raise RuntimeError(f"bulk submit to {queue}: {code}")
    else:
        ab_run(ab, f"{url}/api/v1/workloads/", body, N, token)
    submitted = time.perf_counter()
    mine = Workload.objects.filter(name=name)
    admitted_at = None
    deadline = time.monotonic() + timeout
    while (count := mine.filter(started_at__isnull=False).count()) < N:
        if admitted_at is None and mine.filter(admitted_at__isnull=False).count() >= N:
            admitted_at = time.perf_counter()
        if time.monotonic() > deadline:
            raise RuntimeError(f"{name}: only {count} of {N} started in {timeout:.0f} s")
        time.sleep(0.02)
    done = time.perf_counter()
    admitted_at = admitted_at or done
    clear()
    result = {
        "submitted_per_s": round(N / (submitted - started), 1),
        "admitted_per_s": round(N / (admitted_at - started), 1),
        "starts_per_s": round(N / (done - started), 1),
        "seconds": round(done - started, 2),
    }
    print(f"{name}: {result}", flush=True)
    return result


def report(results: dict[str, Any]) -> None:
    print(f"\nwhole road, {N} workloads through the API to started, on {os.cpu_count()} CPUs, worker running:")
    print(f"  {'fabric':<7} {'bulk starts/s':>13} {'naive starts/s':>14} {'ratio':>6}   goal >= {GOAL:.0f}/s")
    for fabric in ("local", "agents"):
        bulk, naive = results[fabric]["bulk"], results[fabric]["naive"]
        best = max(bulk["starts_per_s"], naive["starts_per_s"])
        ratio = bulk["starts_per_s"] / naive["starts_per_s"]
        met = "met" if best >= GOAL else "NOT met"
        print(f"  {fabric:<7} {bulk['starts_per_s']:>13.0f} {naive['starts_per_s']:>14.0f} {ratio:>5.1f}x   {met}")
    print(f"load average {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    print(run())
