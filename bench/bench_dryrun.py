"""The dry run (POST /api/v1/workloads/dry-run/) with 10,000 workloads waiting, side by side in one run:

    stream    dry runs one after another through Django's request handler with a bearer token, as agents send
              them (30 teams, a few shapes each; then one agent's few shapes): p50, p99 and dry runs per second,
              beside the goal (10 ms, 50 ms, 300/s); the snapshot is built afresh every
              GRIDLANE_DRY_RUN_SNAPSHOT_SECONDS, inside the stream
    cold      one placement on a snapshot it has not seen that shape on (scheduler/dryrun_fast.py), beside
              the plain path (decide() on the whole snapshot plus the job)
    worker    the worker's admission (snapshot, decide, apply) alone, then beside a dry-run stream at 300/s in
              another process: the ratio of its cycle times (goal <= 1.10)

The cast: 30 teams, one queue each, six to a pool of 120 GPUs (five pools), every GPU held by running work,
10,000 workloads waiting in two tiers (so no team's slice of candidates is full: every dry run is placed).
"""

from __future__ import annotations

import json
import os
import random
import statistics
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
WAITING = 10_000
STREAM = 3000  # dry runs in a measured stream, at most
STREAM_S = 60  # and seconds
RATE = 300  # dry runs per second beside the worker
CYCLES = 12


def run() -> dict[str, Any]:
    from bench.bench_scheduler import django_setup

    django_setup()
    tokens = cast()
    results: dict[str, Any] = {
        "stream": stream(tokens, teams=30, label="30 teams' agents"),
        "one_agent": stream(tokens, teams=1, label="one team's agent"),
        "cold": cold(),
    }
    results["worker"] = worker_beside_stream(tokens)
    return results


def cast() -> list[str]:
    """The bench's teams, pools, running and waiting work; returns a bearer token of each team's agent."""
    from django.contrib.auth import get_user_model
    from django.utils import timezone

    from bench.bench_scheduler import _fresh_cast
    from portal.accounts.models import ApiToken, Membership
    from portal.workloads.models import Workload
    from portal.workloads.states import State

    user, queues = _fresh_cast(groups=30, queues_per_group=1, fabrics=5, gpus_per_fabric=120)
    now = timezone.now()
    rows = []
    for i, (queue, group) in enumerate(queues):  # 20 GPUs running per team: every pool full
        target = queue.targets.first()
        for k in range(5):
            rows.append(Workload(owner=user, group=group, queue=queue, kind="batch", name=f"r{i}-{k}", command="true",
                                 gpus_milli=4000, cpus_milli=1000, memory_mib=1024, runtime_limit_s=3600 * (k + 1),
                                 state=State.RUNNING, fabric=target.fabric, target=target,
                                 submitted_at=now - timedelta(hours=1), admitted_at=now - timedelta(hours=1),
                                 started_at=now - timedelta(minutes=30), updated_at=now))  # fmt: skip
    rnd = random.Random(3)
    for i in range(WAITING):
        queue, group = queues[i % len(queues)]
        rows.append(Workload(owner=user, group=group, queue=queue, kind="batch", name=f"w{i}", command="true",
                             gpus_milli=rnd.choice([1000, 2000, 4000]), cpus_milli=1000, memory_mib=1024,
                             runtime_limit_s=3600, priority=("normal", "low")[i // len(queues) % 2],
                             submitted_at=now - timedelta(seconds=WAITING - i), updated_at=now))  # fmt: skip
    Workload.objects.bulk_create(rows, batch_size=2000)
    tokens = []
    for i, (_, group) in enumerate(queues):  # an agent of each team, in that team alone
        agent = get_user_model().objects.create(username=f"agent{i}")
        Membership.objects.create(user=agent, group=group)
        tokens.append(ApiToken.issue(agent, "bench")[1])
    return tokens


def bodies(n: int, seed: int, teams: int = 30) -> list[dict[str, Any]]:
    """Dry-run bodies as agents send them: each team's few shapes (1, 2 or 4 GPUs; normal or low)."""
    rnd = random.Random(seed)
    return [
        {"queue": f"t{rnd.randrange(teams)}-q0", "kind": "batch", "name": "probe", "command": "python run.py",
         "resources": {"gpus": rnd.choice([1, 2, 4]), "cpus": 1, "memory_gb": 1},
         "runtime_limit_minutes": 60, "priority": rnd.choice(["normal", "low"])}
        for _ in range(n)
    ]  # fmt: skip


class Agents:
    """One API client per team's agent; a body goes out as its queue's team's."""

    def __init__(self, tokens: list[str]) -> None:
        from rest_framework.test import APIClient

        self.clients = []
        for token in tokens:
            api = APIClient(SERVER_NAME="127.0.0.1")
            api.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
            self.clients.append(api)


def send(agents: Agents, body: dict[str, Any]) -> dict[str, Any]:
    api = agents.clients[int(body["queue"][1:].split("-")[0])]  # "t7-q0": team 7
    response = api.post("/api/v1/workloads/dry-run/", json.dumps(body), content_type="application/json")
    if response.status_code != 200:
        raise SystemExit(f"bench dryrun: {response.status_code} {response.content[:300]!r}")
    return response.json()  # type: ignore[no-any-return]


def stream(tokens: list[str], teams: int, label: str) -> dict[str, Any]:
    """Dry runs one after another for STREAM_S seconds (at most STREAM of them)."""
    api = Agents(tokens)
    for body in bodies(50, seed=1, teams=teams):  # warm up: imports, compiled queries, the first snapshot
        send(api, body)
    times, outcomes = [], {"admit": 0, "wait": 0}
    started = time.perf_counter()
    for body in bodies(STREAM, seed=2, teams=teams):
        if time.perf_counter() - started > STREAM_S:
            break
        t = time.perf_counter()
        outcomes[send(api, body)["outcome"]] += 1
        times.append((time.perf_counter() - t) * 1000)
    wall = time.perf_counter() - started
    times.sort()
    p50, p99 = times[len(times) // 2], times[int(len(times) * 0.99)]
    rate = len(times) / wall
    print(
        f"dry run, {WAITING:,} waiting, {label}, {len(times)} one after another: "
        f"p50 {p50:.2f} ms (goal <= 10, {p50 / 10:.2f}x), "
        f"p99 {p99:.2f} ms (goal <= 50, {p99 / 50:.2f}x), {rate:,.0f}/s in one thread (goal >= 300, "
        f"{rate / 300:.2f}x); answers {outcomes}"
    )
    return {"p50_ms": round(p50, 2), "p99_ms": round(p99, 2), "per_second": round(rate), "outcomes": outcomes}


def cold() -> dict[str, Any]:
    """One placement per shape on a fresh Memo (a miss), beside decide() on the whole snapshot plus the job."""
    from portal.worker import dryrun
    from portal.workloads import context
    from scheduler.dryrun import place
    from scheduler.dryrun_fast import Parts, place_fast

    kept = dryrun.SNAPSHOTS.latest(context.read_generation())
    snap = kept.snapshot
    jobs = [j for j in snap.pending[:: max(1, len(snap.pending) // 40)]][:40]
    asked = [
        type(j)(dryrun.JOB_ID, j.group_id, j.queue_id, j.per_node, priority=j.priority, submitted_at=snap.now)
        for j in jobs
    ]
    parts_started = time.perf_counter()
    parts = Parts(snap)
    parts_ms = (time.perf_counter() - parts_started) * 1000
    fast, plain = [], []
    for job in asked:
        t = time.perf_counter()
        got = place_fast(parts, job)
        fast.append((time.perf_counter() - t) * 1000)
        t = time.perf_counter()
        want = place(snap, job)
        plain.append((time.perf_counter() - t) * 1000)
        if got != want:
            raise SystemExit(f"bench dryrun: the fast path placed {job} at {got}, the plain path at {want}")
    fast_ms, plain_ms = statistics.median(fast), statistics.median(plain)
    print(
        f"one placement on {len(snap.pending):,} waiting (a shape not seen on this snapshot): fast path "
        f"{fast_ms:.2f} ms vs decide() on the whole {plain_ms:.2f} ms = {fast_ms / plain_ms:.2f}x "
        f"(the snapshot's parts once: {parts_ms:.1f} ms); {len(asked)} placements, all equal"
    )
    return {"fast_ms": round(fast_ms, 2), "plain_ms": round(plain_ms, 2), "parts_ms": round(parts_ms, 1)}


def worker_beside_stream(tokens: list[str]) -> dict[str, Any]:
    """The worker's admission, cycle after cycle, alone and then beside a dry-run stream in another process."""
    alone = cycles()
    child = subprocess.Popen(
        [sys.executable, "-m", "bench.bench_dryrun", "stream-child", str(RATE)],
        cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT), "BENCH_DRYRUN_TOKENS": ",".join(tokens)},
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    if child.stdout is not None:
        child.stdout.readline()  # "ready": warmed up and streaming
    try:
        beside = cycles()
    finally:
        child.terminate()
        sent = child.communicate(timeout=30)[0].strip()
    ratio = beside / alone
    print(
        f"worker admission over {WAITING:,} waiting: {alone * 1000:.0f} ms alone vs {beside * 1000:.0f} ms beside "
        f"dry runs at up to {RATE}/s = {ratio:.2f}x (goal <= 1.10); the stream: {sent}"
    )
    return {"alone_ms": round(alone * 1000), "beside_ms": round(beside * 1000), "ratio": round(ratio, 3)}


def cycles() -> float:
    from portal.worker import tasks

    times = []
    for _ in range(CYCLES):
        t = time.perf_counter()
        tasks.admit()
        times.append(time.perf_counter() - t)
    return statistics.median(times[2:])


def stream_child(rate: int) -> None:
    """A dry-run stream at up to `rate` per second until terminated (in its own process, as a web server is)."""
    import signal

    import django

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
    django.setup()
    api = Agents(os.environ["BENCH_DRYRUN_TOKENS"].split(","))
    sent = 0
    stop: list[int] = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    for body in bodies(20, seed=4):
        send(api, body)
    print("ready", flush=True)
    started = time.perf_counter()
    shapes = bodies(1000, seed=5)
    while not stop:
        send(api, shapes[sent % len(shapes)])
        sent += 1
        ahead = sent / rate - (time.perf_counter() - started)
        if ahead > 0:
            time.sleep(ahead)
    print(f"{sent} dry runs, {sent / (time.perf_counter() - started):.0f}/s", flush=True)


if __name__ == "__main__" and sys.argv[1:2] == ["stream-child"]:
    stream_child(int(sys.argv[2]))
