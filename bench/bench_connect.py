"""The connect path against the same Jupyter reached directly, side by side on this machine.

    direct    Jupyter's own server: GET <base>/api/status with its token (what the portal itself sends on)
    proxy     the same request through the portal's connect process (gunicorn with uvicorn's workers serving
              portal.asgi, as deploy/systemd/gridlane-connect.service runs it), with a signed-in session
              instead of the token: the sign-in check, the header rewriting and the extra hop included

for small requests (ab -c 16 for throughput, ab -c 1 for the latency one request adds), alternating in paired
rounds; then a 200 MB download (Jupyter's /files/ handler), direct and through the portal, best of two each.
"""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from bench.bench_scheduler import django_setup
from bench.bench_submit import ROOT, VENV_BIN, ab_measure, ensure_ab, free_port, server_env

REQUESTS = int(os.environ.get("GRIDLANE_BENCH_REQUESTS", "2000"))
CONCURRENCY = 16
LATENCY_REQUESTS = 300
ROUNDS = 2
MB = 1024 * 1024
DOWNLOAD_MB = 200


def run() -> dict[str, Any]:
    ab = ensure_ab()
    django_setup()
    with tempfile.TemporaryDirectory() as home:
        root = Path(home)
        (root / "big.bin").write_bytes(os.urandom(MB) * DOWNLOAD_MB)
        token = secrets.token_urlsafe(32)
        workload_id, cookie = cast()
        prefix = f"/connect/{workload_id}/"
        with jupyter(root, prefix, token) as port, connect_process() as portal:
            record(workload_id, port, token, prefix)
            direct = (f"http://127.0.0.1:{port}{prefix}", f"Authorization: token {token}")
            proxied = (f"{portal}{prefix}", f"Cookie: {cookie}")
            for base, header in (direct, proxied):  # warm up: pools, imports, the first connections
                ab_get(ab, base + "api/status", header, 200, CONCURRENCY)
            rounds: dict[str, list[dict[str, float]]] = {"direct": [], "proxy": [], "direct_1": [], "proxy_1": []}
            for r in range(ROUNDS):
                order = [("direct", direct), ("proxy", proxied)]
                for name, (base, header) in order if r % 2 == 0 else order[::-1]:
                    rounds[name].append(ab_get(ab, base + "api/status", header, REQUESTS, CONCURRENCY))
                    rounds[name + "_1"].append(ab_get(ab, base + "api/status", header, LATENCY_REQUESTS, 1))
            download = {
                "direct_mb_s": max(rate(direct[0] + "files/big.bin", direct[1]) for _ in range(2)),
                "proxy_mb_s": max(rate(proxied[0] + "files/big.bin", proxied[1]) for _ in range(2)),
            }
    results = summarise(rounds, download)
    report(results)
    return results


# --- Set-up -----------------------------------------------------------------------------------------------


def cast() -> tuple[str, str]:
    """alice's notebook, running on a Slurm fabric (never asked: the bench starts the server), and a signed-in
    session of hers. Returns (workload id, Cookie value)."""
    from django.conf import settings
    from django.contrib.auth import get_user_model
    from django.contrib.sessions.backends.db import SessionStore
    from django.core.management import call_command

    from portal.accounts.models import ResourceGroup
    from portal.queues.models import Fabric, Queue, QueueTarget
    from portal.workloads import services
    from portal.workloads.models import Workload

    call_command("flush", interactive=False, verbosity=0)
    call_command("seed_demo", stdout=open(os.devnull, "w"))  # noqa: SIM115
    alice = get_user_model().objects.get(username="alice")
    fabric = Fabric.objects.create(name="hpc", kind="slurm", gpus_milli=8000, cpus_milli=64000, memory_mib=10**6)
    queue = Queue.objects.create(slug="hpc-nb", name="HPC notebooks", kinds=["notebook"])
    queue.allowed_groups.add(ResourceGroup.objects.get(slug="vision"))
    QueueTarget.objects.create(queue=queue, fabric=fabric)
    request = services.SubmitRequest(queue="hpc-nb", kind="notebook", name="bench", command="")
    workload, _ = services.submit(alice, request)
    Workload.objects.filter(pk=workload.pk).update(state="running", fabric=fabric, external_id="1")
    session = SessionStore()
    session["_auth_user_id"] = str(alice.pk)
    session["_auth_user_backend"] = settings.AUTHENTICATION_BACKENDS[0]
    session["_auth_user_hash"] = alice.get_session_auth_hash()
    session.create()
    return str(workload.pk), f"{settings.SESSION_COOKIE_NAME}={session.session_key}"


def record(workload_id: str, port: int, token: str, prefix: str) -> None:
    from fabrics.base import Endpoint
    from portal.workloads import notebook_endpoint
    from portal.workloads.models import Workload

    notebook_endpoint.record(Workload.objects.get(pk=workload_id), Endpoint("127.0.0.1", port, token, prefix))


@contextmanager
def jupyter(root: Path, prefix: str, token: str) -> Iterator[int]:
    port = free_port()
    env = dict(os.environ) | {"JUPYTER_TOKEN": token, "JUPYTER_RUNTIME_DIR": str(root / ".rt"),
                              "JUPYTER_CONFIG_DIR": str(root / ".cfg")}  # fmt: skip
    proc = subprocess.Popen(
        [sys.executable, "-m", "jupyter_server", "--no-browser", "--ip=127.0.0.1", f"--port={port}",
         f"--ServerApp.base_url={prefix}", f"--ServerApp.root_dir={root}", "--allow-root", "--log-level=WARN"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip
    try:
        wait(f"http://127.0.0.1:{port}{prefix}api", proc)
        yield port
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)


@contextmanager
def connect_process() -> Iterator[str]:
    """The connect process as deploy/systemd/gridlane-connect.service starts it: two uvicorn workers."""
    port = free_port()
    env = server_env() | {"GRIDLANE_BIND": f"127.0.0.1:{port}", "GRIDLANE_WEB_WORKERS": "2",
                          "GRIDLANE_WEB_WORKER_CLASS": "uvicorn_worker.UvicornWorker"}  # fmt: skip
    argv = [str(VENV_BIN / "gunicorn"), "-c", str(ROOT / "deploy" / "gunicorn.conf.py"), "portal.asgi:application",
            "--access-logfile", "/dev/null"]  # fmt: skip
    proc = subprocess.Popen(argv, env=env, cwd=ROOT, stdout=subprocess.DEVNULL, start_new_session=True)
    try:
        wait(f"http://127.0.0.1:{port}/healthz", proc)
        yield f"http://127.0.0.1:{port}"
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)


def wait(url: str, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            with urllib.request.urlopen(url, timeout=2):  # noqa: S310 (loopback)
                return
        except OSError:
            time.sleep(0.2)
    raise SystemExit(f"bench connect: {url} did not answer")


# --- Measuring -----------------------------------------------------------------------------------------------


def ab_get(ab: str, url: str, header: str, n: int, concurrency: int) -> dict[str, float]:
    """ab's throughput and latency percentiles for GETs; every answer must be a 2xx."""
    measured = ab_measure([ab, "-q", "-l", "-n", str(n), "-c", str(concurrency), "-H", header, url], n)
    if measured["non_2xx"]:
        raise RuntimeError(f"ab against {url}: {measured['non_2xx']:.0f} answers were not 2xx")
    return measured


def rate(url: str, header: str) -> float:
    """MB/s of one whole download, read in 1 MB pieces."""
    name, value = header.split(": ", 1)
    request = urllib.request.Request(url, headers={name: value})  # noqa: S310 (loopback)
    started, got = time.perf_counter(), 0
    with urllib.request.urlopen(request, timeout=300) as answer:  # noqa: S310
        while chunk := answer.read(MB):
            got += len(chunk)
    if got != DOWNLOAD_MB * MB:
        raise RuntimeError(f"bench connect: {url} gave {got} bytes")
    return got / MB / (time.perf_counter() - started)


def summarise(rounds: dict[str, list[dict[str, float]]], download: dict[str, float]) -> dict[str, Any]:
    def median(name: str, key: str) -> float:
        values = sorted(r[key] for r in rounds[name])
        return values[len(values) // 2]

    return {
        "direct_rps": median("direct", "rps"),
        "proxy_rps": median("proxy", "rps"),
        "throughput_ratio": median("proxy", "rps") / median("direct", "rps"),
        "direct_p99_ms_c16": median("direct", "p99_ms"),
        "proxy_p99_ms_c16": median("proxy", "p99_ms"),
        "added_p50_ms_c1": median("proxy_1", "p50_ms") - median("direct_1", "p50_ms"),
        "added_p99_ms_c1": median("proxy_1", "p99_ms") - median("direct_1", "p99_ms"),
        **download,
        "download_ratio": download["proxy_mb_s"] / download["direct_mb_s"],
    }


def report(r: dict[str, Any]) -> None:
    print(f"small requests, ab -c {CONCURRENCY}: direct {r['direct_rps']:.0f}/s, through the portal "
          f"{r['proxy_rps']:.0f}/s = {r['throughput_ratio']:.2f}x (goal >= 0.5x); p99 {r['direct_p99_ms_c16']:.0f} ms "
          f"vs {r['proxy_p99_ms_c16']:.0f} ms")  # fmt: skip
    print(f"one at a time: the portal adds {r['added_p50_ms_c1']:.0f} ms at p50, {r['added_p99_ms_c1']:.0f} ms "
          f"at p99 (goal < 20 ms)")  # fmt: skip
    print(f"{DOWNLOAD_MB} MB download: direct {r['direct_mb_s']:.0f} MB/s, through the portal "
          f"{r['proxy_mb_s']:.0f} MB/s = {r['download_ratio']:.2f}x (goal >= 0.7x)")  # fmt: skip
