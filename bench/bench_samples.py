"""What GPU sampling costs the portal: 2,000 running GPUs, each sampled every 30 s (goal: under 5 % of one core).

2,000 single-GPU workloads run (the worst case: one sampler, one secret and one post per GPU; a node of eight
GPUs posts once for all eight). Each reading is kept as a sample and one row per GPU (UsageGpuSample), after
its node's turn (UsageTurn, read with the workload: the sampler names its node on the URL) is taken: four
queries a post.
Their samplers post to gunicorn (gthread, 2 processes x 8 threads, as
deployed) from 16 client threads, outside the measured processes. The cost is CPU time, not wall time: the
web processes' (gunicorn's process tree) and their database backends' (PostgreSQL's own per-connection
processes, found by application name), read from /proc before and after, over the time the posts stand for.

    per reading   one post per sample, every 30 s (a sampler that posts each reading at once): 2,000 posts
                  stand for 30 s of the site
    batched       the sampler's default: a reading every 30 s, posted GRIDLANE_SAMPLE_BATCH at a time (its
                  first at once): 2,000 posts of that many readings stand for that many times 30 s

and the worker's share: the rollup and idle-GPU steps (as often as they run, GRIDLANE_ROLLUP_SECONDS) over
an hour of those samples (240,000 rows), measured in this process and its database backend.
"""

from __future__ import annotations

import http.client
import json
import os
import statistics
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from pathlib import Path
from typing import Any

from bench.bench_scheduler import django_setup
from bench.bench_submit import CLASSES, gunicorn, server_env

GPUS = 2000
EVERY_S = 30
CLIENTS = 16
APP = "gridlane-bench-samples"  # the web processes' database connections, by name (libpq's PGAPPNAME)
TICKS = os.sysconf("SC_CLK_TCK")
NVIDIA_SMI = "0, {u}, 10240\n"


def run() -> dict[str, Any]:
    os.environ.setdefault("GRIDLANE_ALLOWED_HOSTS", "127.0.0.1,localhost")
    django_setup()
    from django.conf import settings

    batch = settings.GRIDLANE_SAMPLE_BATCH
    secrets = _seed()
    env = server_env() | {"PGAPPNAME": APP}
    results: dict[str, Any] = {"gpus": GPUS, "every_s": EVERY_S, "batch": batch}
    with gunicorn(CLASSES["gthread"], env) as url:
        _post_all(url, secrets, 1, 0)  # warm: every process and thread has its connection
        for name, readings in (("per_reading", 1), ("batched", batch)):
            _reset()
            cpu, wall = _measured(url, secrets, readings)
            stands_for = readings * EVERY_S
            results[name] = {
                "posts": GPUS,
                "readings_per_post": readings,
                "cpu_s": round(cpu, 3),
                "wall_s": round(wall, 2),
                "core_share_pct": round(100 * cpu / stands_for, 2),
            }
    results["worker"] = _worker_share()
    total = results["batched"]["core_share_pct"] + results["worker"]["core_share_pct"]
    results["total_core_share_pct"] = round(total, 2)
    results["goal_under_5_pct"] = total < 5
    _report(results)
    return results


def _seed() -> list[tuple[str, str]]:
    """2,000 running one-GPU workloads on a Slurm fabric; their ids and secrets."""
    from django.contrib.auth import get_user_model
    from django.core.management import call_command
    from django.utils import timezone

    from portal.accounts.models import ResourceGroup
    from portal.queues.models import Fabric, Queue
    from portal.workloads.models import Workload
    from portal.workloads.notebook_endpoint import secret
    from portal.workloads.states import State

    call_command("flush", interactive=False, verbosity=0)
    call_command("seed_demo", verbosity=0)
    alice = get_user_model().objects.get(username="alice")
    vision = ResourceGroup.objects.get(slug="vision")
    fabric = Fabric.objects.filter(kind="slurm").first() or Fabric.objects.first()
    queue = Queue.objects.first()
    started = timezone.now() - timedelta(hours=2)
    rows = [
        Workload(id=uuid.uuid4(), owner=alice, group=vision, queue=queue, fabric=fabric, kind="training",
                 name=f"sampled-{i}", command="true", gpus_milli=1000, runtime_limit_s=86400, state=State.RUNNING,
                 submitted_at=started, admitted_at=started, started_at=started)
        for i in range(GPUS)
    ]  # fmt: skip
    Workload.objects.bulk_create(rows, batch_size=500)
    return [(str(w.pk), secret(w.run_id)) for w in rows]


def _reset() -> None:
    """No sample yet: every workload (every node's turn) may report again."""
    from portal.usage.models import UsageGpuSample, UsageSample, UsageTurn
    from portal.workloads.models import Workload

    UsageSample.objects.all().delete()
    UsageGpuSample.objects.all().delete()
    UsageTurn.objects.all().delete()
    Workload.objects.update(last_sample_at=None)


def _body(readings: int, seed: int) -> bytes:
    if readings == 1:
        return json.dumps({"nvidia_smi": NVIDIA_SMI.format(u=seed % 101)}).encode()
    taken = [{"age": (readings - 1 - k) * EVERY_S, "nvidia_smi": NVIDIA_SMI.format(u=(seed + k) % 101)}
             for k in range(readings)]  # fmt: skip
    return json.dumps({"readings": taken}).encode()


def _post_all(url: str, secrets: list[tuple[str, str]], readings: int, seed: int) -> list[int]:
    """Every workload posts once; the answers' status codes."""
    host, port = url.removeprefix("http://").split(":")
    chunks = [secrets[i::CLIENTS] for i in range(CLIENTS)]

    def client(chunk: list[tuple[str, str]]) -> list[int]:
        conn = http.client.HTTPConnection(host, int(port), timeout=60)
        codes = []
        for n, (pk, token) in enumerate(chunk):
            headers = {"Content-Type": "application/json", "Authorization": f"Bearer {token}"}
            conn.request("POST", f"/api/v1/workloads/{pk}/samples/?node=n1", _body(readings, seed + n), headers)
            response = conn.getresponse()
            response.read()
            codes.append(response.status)
        conn.close()
        return codes

    with ThreadPoolExecutor(CLIENTS) as pool:
        return [code for codes in pool.map(client, chunks) for code in codes]


def _measured(url: str, secrets: list[tuple[str, str]], readings: int) -> tuple[float, float]:
    """CPU seconds the web processes and their database backends spent on one post per workload, and the wall
    time it took. Every post must be kept (204)."""
    pids = _web_pids(url)
    before = _cpu(pids)
    started = time.perf_counter()
    codes = _post_all(url, secrets, readings, 7)
    wall = time.perf_counter() - started
    cpu = _cpu(pids) - before
    bad = [c for c in codes if c != 204]
    if bad:
        raise RuntimeError(f"{len(bad)} posts not kept: {sorted(set(bad))}")
    return cpu, wall


def _web_pids(url: str) -> list[int]:
    """gunicorn's master (its reaped children's time included) and workers, and their database backends."""
    from django.db import connection

    port = url.rsplit(":", 1)[1]
    # Forked workers share their master's command line: the master is the one whose parent is not one of them.
    gunicorns = {p for p in _processes() if f"127.0.0.1:{port}" in _cmdline(p) and "gunicorn" in _cmdline(p)}
    masters = {p for p in gunicorns if _ppid(p) not in gunicorns}
    web = sorted(masters | {p for p in _processes() if _ppid(p) in masters})
    with connection.cursor() as cursor:
        cursor.execute("SELECT pid FROM pg_stat_activity WHERE application_name = %s", [APP])
        backends = [row[0] for row in cursor.fetchall()]
    if not masters or not backends:
        raise RuntimeError("bench samples: the web processes or their database connections were not found")
    return web + backends


def _worker_share() -> dict[str, Any]:
    """The rollup and idle-GPU steps over an hour of 2,000 GPUs' samples, as often as the worker runs them."""
    from django.conf import settings
    from django.db import connection
    from django.utils import timezone

    from portal.usage import rollup
    from portal.worker import gpu_idle

    now = timezone.now()
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO usage_usagesample (workload_id, at, source, gpus_milli, gpu_utilisation) "
            "SELECT w.id, %s - g * interval '30 seconds', 'job', 1000, (g * 7919 %% 101) "
            "FROM workloads_workload w, generate_series(0, 119) g WHERE w.name LIKE 'sampled-%%'",
            [now],
        )
        cursor.execute("ANALYZE")
        cursor.execute("SELECT pg_backend_pid()")
        backend = cursor.fetchone()[0]
    rounds = []
    for k in range(5):
        at = now + timedelta(seconds=k)
        pids = [os.getpid(), backend]
        before = _cpu(pids)
        rollup.step(at)
        gpu_idle.step(at)
        rounds.append(_cpu(pids) - before)
    every = settings.GRIDLANE_ROLLUP_SECONDS
    each = statistics.median(rounds)
    return {"step_cpu_ms": round(each * 1000, 1), "every_s": every, "core_share_pct": round(100 * each / every, 2)}


def _report(r: dict[str, Any]) -> None:
    print(f"\nGPU sampling, {r['gpus']:,} GPUs every {r['every_s']} s (gunicorn gthread 2x8; CPU of web + database):")
    print(f"  {'':<12} {'readings/post':>13} {'CPU s':>7} {'wall s':>7} {'of one core':>12}")
    for name in ("per_reading", "batched"):
        m = r[name]
        print(f"  {name:<12} {m['readings_per_post']:>13} {m['cpu_s']:>7.2f} {m['wall_s']:>7.2f} "
              f"{m['core_share_pct']:>11.2f}%")  # fmt: skip
    w = r["worker"]
    print(f"  worker: rollup + idle steps {w['step_cpu_ms']} ms CPU every {w['every_s']:g} s = {w['core_share_pct']}%")
    ratio = r["batched"]["core_share_pct"] / max(r["per_reading"]["core_share_pct"], 1e-9)
    print(f"  batched / per reading: {ratio:.2f}x; total (batched + worker) {r['total_core_share_pct']}% "
          f"(goal < 5 %: {'met' if r['goal_under_5_pct'] else 'NOT met'})")  # fmt: skip


# --- /proc --------------------------------------------------------------------------------------------------


def _processes() -> Iterator[int]:
    return (int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit())


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _stat(pid: int) -> list[str]:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return []
    return text[text.rindex(")") + 2 :].split()  # after "pid (comm) ": state is field 0


def _ppid(pid: int) -> int:
    fields = _stat(pid)
    return int(fields[1]) if fields else 0


def _cpu(pids: list[int]) -> float:
    """CPU seconds of the processes, with their reaped children's (utime, stime, cutime, cstime)."""
    total = 0
    for pid in pids:
        fields = _stat(pid)
        if fields:
            total += sum(int(f) for f in fields[11:15])
    return total / TICKS
