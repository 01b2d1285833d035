"""Agent pickup latency: from admission to start, through two real `gridlane agent` processes.

A live portal (Django's threaded WSGI server in this process, on 127.0.0.1) and the worker's cycle
(in a thread, every 50 ms, as django-q2 runs it when kicked) against PostgreSQL; two agents long-poll
the claim endpoint. Workloads are submitted one at a time; for each, pickup = started_at (the moment
an agent claimed it) - admitted_at. The goal is p50 <= 0.5 s (ClearML's agent polls every 5 s).
"""

from __future__ import annotations

import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from bench.bench_scheduler import django_setup

WORKLOADS = 60
ROOT = Path(__file__).resolve().parents[1]


def run() -> dict[str, Any]:
    django_setup()
    from django.core.management import call_command
    from django.core.servers.basehttp import ThreadedWSGIServer, WSGIRequestHandler
    from django.core.wsgi import get_wsgi_application

    from portal.worker import tasks
    from portal.workloads.models import Workload

    call_command("flush", interactive=False, verbosity=0)
    token, alice = _cast()

    class Quiet(WSGIRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadedWSGIServer(("127.0.0.1", 0), Quiet)
    server.set_app(get_wsgi_application())
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}"

    stop = threading.Event()

    def cycles() -> None:
        while not stop.wait(0.05):
            tasks.cycle()

    threading.Thread(target=cycles, daemon=True).start()
    agents = []
    with tempfile.TemporaryDirectory() as work:
        for name in ("bench-1", "bench-2"):
            argv = [sys.executable, "-m", "gridlane_cli.main", "--server", url, "--token", token, "agent",
                    "--name", name, "--queue", "gpu-a", "--slots", "4", "--workdir", f"{work}/{name}",
                    "--nvidia-smi", f"{work}/none"]  # fmt: skip
            env = {**os.environ, "PYTHONPATH": str(ROOT)}
            agents.append(subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env))
        time.sleep(2)  # both registered and long-polling
        ids = []
        for i in range(WORKLOADS):
            ids.append(_submit(alice, f"pickup-{i}").pk)
            time.sleep(0.15)
        deadline = time.monotonic() + 60
        done = Workload.objects.filter(pk__in=ids, started_at__isnull=False, admitted_at__isnull=False)
        while done.count() < WORKLOADS and time.monotonic() < deadline:
            time.sleep(0.1)
        pickups = sorted((w.started_at - w.admitted_at).total_seconds() for w in done if w.started_at and w.admitted_at)
        stop.set()
        for proc in agents:
            proc.send_signal(signal.SIGTERM)
        for proc in agents:
            proc.wait(timeout=20)
    server.shutdown()
    p50 = statistics.median(pickups)
    p95 = pickups[max(0, round(0.95 * len(pickups)) - 1)]
    print(f"agent pickup, admission -> start, {len(pickups)} workloads, 2 agents: p50 {p50:.3f} s, p95 {p95:.3f} s")
    print(f"goal p50 <= 0.5 s: {'met' if p50 <= 0.5 else 'NOT met'}")
    return {"workloads": len(pickups), "pickup_p50_s": round(p50, 4), "pickup_p95_s": round(p95, 4)}


def _cast() -> tuple[str, Any]:
    """The demo cast plus an agent fabric `hosts` behind queue gpu-a, and an agent token for it."""
    from django.contrib.auth import get_user_model
    from django.core.management import call_command

    from portal.accounts.models import ResourceGroup
    from portal.agents import services
    from portal.queues.models import Fabric, Queue, QueueTarget, Quota

    call_command("seed_demo", stdout=open(os.devnull, "w"))  # noqa: SIM115
    users = get_user_model().objects
    vision = ResourceGroup.objects.get(slug="vision")
    fabric = Fabric.objects.create(name="hosts", kind="agent", gpus_milli=8000, cpus_milli=1_000_000,
                                   memory_mib=10_000_000)  # fmt: skip
    queue = Queue.objects.create(slug="gpu-a", name="gpu-a", kinds=["batch"], max_runtime_minutes=600)
    queue.allowed_groups.add(vision)
    QueueTarget.objects.create(queue=queue, fabric=fabric)
    Quota.objects.create(group=vision, fabric=fabric, gpu_reservation_milli=8000, gpu_limit_milli=8000)
    _, token = services.enroll(fabric, "bench-agent", vision, by=users.get(username="it"))
    return token, users.get(username="alice")


def _submit(user: Any, name: str) -> Any:
    from portal.workloads import services

    workload, _ = services.submit(user, services.SubmitRequest(queue="gpu-a", kind="batch", name=name, command="true"))
    return workload


if __name__ == "__main__":
    print(run())
