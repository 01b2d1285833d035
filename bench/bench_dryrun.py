"""The dry run (POST /api/v1/workloads/dry-run/) with 10,000 workloads waiting, side by side in one run:

    streams   dry runs through Django's request handler with a bearer token, as agents send them, from CLIENTS
              processes at once (each a web process with its own kept snapshot, rebuilt beside its requests):
              one team's agent with few shapes, then 30 teams' agents with mixed shapes; p50, p99 and dry runs
              per second over them all, beside the goal (10 ms, 50 ms, 300/s)
    cold      one placement on a snapshot it has not seen that shape on (scheduler/dryrun_fast.py), beside
              the plain path (decide() on the whole snapshot plus the job)
    worker    the worker's admission (snapshot, decide, apply) with the 30 teams' stream from CLIENTS processes
              paused, then sending, ROUNDS times in turn: the ratio of its median cycle times (goal <= 1.10 at the
              goal's 300/s), and the stream's own p50 and p99 beside it. The clients run at the niceness the web's
              unit gives its processes (deploy/systemd/gridlane-web.service: the worker's cycle comes first when
              the host is short of CPU); then, for the record, the same with the clients at the worker's own
              niceness, and at the most the stream reached alone (a stress)

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
STREAM_S = 20  # seconds of a measured stream
CLIENTS = 2  # processes sending dry runs at once (this machine has two cores)
RATE = 300  # the goal's dry runs per second beside the worker
ASKED = 330  # asked of the paced clients, so that what they reach (a little under what is asked) is at least RATE
CYCLES = 8  # admissions on each side of a round
ROUNDS = 6  # rounds of the stream paused, then sending
PAUSE_S = 0.5  # after a word to the clients, before measuring
WEB_UNIT = ROOT / "deploy" / "systemd" / "gridlane-web.service"


def run() -> dict[str, Any]:
    from bench.bench_scheduler import django_setup

    django_setup()
    tokens = cast()
    results: dict[str, Any] = {
        "one_agent": stream(tokens, teams=1, label="one team's agent, few shapes"),
        "stream": stream(tokens, teams=30, label="30 teams' agents, mixed shapes"),
        "cold": cold(),
    }
    # The goal's rate (300/s: the worker slowed by at most 10 %) with the web's processes as deployed; then at
    # the worker's own niceness, and the most the stream reached (a stress), for the record.
    nice = web_niceness()
    results["worker"] = worker_beside_stream(tokens, ASKED, nice)
    results["worker_same_priority"] = worker_beside_stream(tokens, ASKED, 0)
    results["worker_at_most"] = worker_beside_stream(tokens, max(ASKED, results["stream"]["per_second"]), nice)
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


class Clients:
    """CLIENTS processes sending dry runs (stream_child), each warmed up (its first snapshot built) before they
    all start together; `results()` stops them and gathers each one's latencies."""

    def __init__(self, tokens: list[str], teams: int, rate: float, seconds: float, nice: int = 0) -> None:
        env = {**os.environ, "PYTHONPATH": str(ROOT), "BENCH_DRYRUN_TOKENS": ",".join(tokens)}
        self.children = [
            subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "bench.bench_dryrun",
                    "stream-child",
                    str(teams),
                    str(rate / CLIENTS),
                    str(seconds),
                    str(10 + i),
                    str(nice),
                ],
                cwd=ROOT,
                env=env,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                text=True,
            )
            for i in range(CLIENTS)
        ]
        for child in self.children:
            if child.stdout is None or child.stdout.readline().strip() != "ready":
                raise SystemExit("bench dryrun: a client did not start")
        for child in self.children:
            if child.stdin is not None:
                child.stdin.write("go\n")
                child.stdin.flush()
        self.started = time.perf_counter()

    def say(self, word: str) -> None:
        """ "pause" or "go" to every client (a client hears it within 20 dry runs)."""
        for child in self.children:
            if child.stdin is not None:
                child.stdin.write(word + "\n")
                child.stdin.flush()

    def results(self) -> tuple[list[float], float, dict[str, int]]:
        """Every dry run's milliseconds, sorted; the seconds the clients ran; the answers' outcomes."""
        times: list[float] = []
        outcomes: dict[str, int] = {}
        wall = 0.0
        for child in self.children:  # (communicate() closes its stdin: a client sending until told stops)
            out = json.loads(child.communicate(timeout=120)[0].strip().splitlines()[-1])
            times += out["times"]
            wall = max(wall, out["wall"])
            for k, v in out["outcomes"].items():
                outcomes[k] = outcomes.get(k, 0) + v
        times.sort()
        return times, wall, outcomes


def summary(times: list[float], wall: float) -> dict[str, Any]:
    p50, p99 = times[len(times) // 2], times[int(len(times) * 0.99)]
    return {"p50_ms": round(p50, 2), "p99_ms": round(p99, 2), "per_second": round(len(times) / wall), "n": len(times)}


def stream(tokens: list[str], teams: int, label: str) -> dict[str, Any]:
    """Dry runs from CLIENTS processes, each as fast as its answers come, for STREAM_S seconds."""
    clients = Clients(tokens, teams, rate=0, seconds=STREAM_S)
    time.sleep(STREAM_S + 1)  # (they stop by themselves)
    times, wall, outcomes = clients.results()
    got = summary(times, wall)
    print(
        f"dry run, {WAITING:,} waiting, {label}, {got['n']} from {CLIENTS} processes in {wall:.0f} s: "
        f"p50 {got['p50_ms']:.2f} ms (goal <= 10, {got['p50_ms'] / 10:.2f}x), "
        f"p99 {got['p99_ms']:.2f} ms (goal <= 50, {got['p99_ms'] / 50:.2f}x), {got['per_second']:,}/s "
        f"(goal >= 300, {got['per_second'] / 300:.2f}x); answers {outcomes}"
    )
    return got | {"outcomes": outcomes}


def cold() -> dict[str, Any]:
    """One placement per shape on a fresh Memo (a miss): placed into the cycle decided once (Known), and on the
    snapshot's part (Parts), beside decide() on the whole snapshot plus the job; all three must agree."""
    from portal.worker import dryrun
    from portal.workloads import context
    from scheduler.dryrun import place
    from scheduler.dryrun_fast import Parts, place_fast
    from scheduler.dryrun_incr import Known

    kept = dryrun.SNAPSHOTS.latest(context.read_generation())
    snap = kept.snapshot
    jobs = [j for j in snap.pending[:: max(1, len(snap.pending) // 40)]][:40]
    asked = [
        type(j)(dryrun.JOB_ID, j.group_id, j.queue_id, j.per_node, priority=j.priority, submitted_at=snap.now)
        for j in jobs
    ]
    t = time.perf_counter()
    parts = Parts(snap)
    parts_ms = (time.perf_counter() - t) * 1000
    t = time.perf_counter()
    known = Known(snap)
    known_ms = (time.perf_counter() - t) * 1000
    incremental, fast, plain = [], [], []
    sure = 0
    for job in asked:
        t = time.perf_counter()
        placed = known.place(job)
        incremental.append((time.perf_counter() - t) * 1000)
        sure += placed is not None
        t = time.perf_counter()
        got = place_fast(parts, job)
        fast.append((time.perf_counter() - t) * 1000)
        t = time.perf_counter()
        want = place(snap, job)
        plain.append((time.perf_counter() - t) * 1000)
        if got != want or placed not in (None, want):
            raise SystemExit(f"bench dryrun: {job} placed at {placed} / {got}, the plain path at {want}")
    incr_ms, fast_ms, plain_ms = statistics.median(incremental), statistics.median(fast), statistics.median(plain)
    print(
        f"one placement on {len(snap.pending):,} waiting (a shape not seen on this snapshot): incremental "
        f"{incr_ms:.3f} ms (sure of {sure} of {len(asked)}), on the part {fast_ms:.2f} ms, decide() on the whole "
        f"{plain_ms:.2f} ms = {incr_ms / plain_ms:.4f}x and {fast_ms / plain_ms:.2f}x (once per snapshot, beside "
        f"the requests: the cycle {known_ms:.0f} ms, the parts {parts_ms:.0f} ms); all equal"
    )
    return {
        "incremental_ms": round(incr_ms, 3), "sure": sure, "asked": len(asked), "fast_ms": round(fast_ms, 2),
        "plain_ms": round(plain_ms, 2), "known_ms": round(known_ms), "parts_ms": round(parts_ms, 1),
    }  # fmt: skip


def web_niceness() -> int:
    """The niceness the web's systemd unit starts its processes at (its `Nice=`; 0 where it sets none)."""
    for line in WEB_UNIT.read_text().splitlines():
        if line.startswith("Nice="):
            return int(line.removeprefix("Nice="))
    return 0


def worker_beside_stream(tokens: list[str], rate: float, nice: int) -> dict[str, Any]:
    """The worker's admission, cycle after cycle, alone and beside the 30 teams' stream at `rate` from CLIENTS
    processes (each a web process, `nice` above this one), in one run: ROUNDS times CYCLES cycles with the stream
    paused, then CYCLES with it sending, so that whatever else the machine does falls on both sides alike; the
    ratio of the medians (and of the means) over every round."""
    clients = Clients(tokens, teams=30, rate=rate, seconds=3600, nice=nice)
    alone: list[float] = []
    beside: list[float] = []
    try:
        cycle_times(2)  # warming
        for _ in range(ROUNDS):
            clients.say("pause")
            time.sleep(PAUSE_S)  # (every client has heard it)
            alone += cycle_times(CYCLES)
            clients.say("go")
            time.sleep(PAUSE_S)
            beside += cycle_times(CYCLES)
    finally:
        times, wall, _ = clients.results()
    got = summary(times, wall)
    ratio = statistics.median(beside) / statistics.median(alone)
    means = statistics.mean(beside) / statistics.mean(alone)
    print(
        f"worker admission over {WAITING:,} waiting, {ROUNDS} x {CYCLES} cycles each side: median "
        f"{statistics.median(alone) * 1000:.0f} ms alone vs {statistics.median(beside) * 1000:.0f} ms beside dry "
        f"runs asked at {rate:.0f}/s from processes at niceness +{nice} = {ratio:.2f}x (goal <= 1.10 at >= {RATE}/s); "
        f"means {means:.2f}x; the stream "
        f"beside it: {got['per_second']}/s, p50 {got['p50_ms']:.2f} ms, p99 {got['p99_ms']:.2f} ms"
    )
    return {
        "alone_ms": round(statistics.median(alone) * 1000), "beside_ms": round(statistics.median(beside) * 1000),
        "ratio": round(ratio, 3), "mean_ratio": round(means, 3), "beside": got,
    }  # fmt: skip


def cycle_times(n: int) -> list[float]:
    """The admission's time, `n` cycles back to back."""
    from portal.worker import tasks

    times = []
    for _ in range(n):
        t = time.perf_counter()
        tasks.admit()
        times.append(time.perf_counter() - t)
    return times


def stream_child(teams: int, rate: float, seconds: float, seed: int, nice: int) -> None:
    """Dry runs at up to `rate` per second (0: as fast as they come) for `seconds` or until stdin closes, in a
    process of its own as a web server's is; prints "ready" once warm, starts on "go", stops sending on "pause"
    until the next "go", and ends with a line of JSON: each dry run's milliseconds, the seconds it ran (its pauses
    left out) and the answers' outcomes. It runs `nice` above the process that started it, as a web process under
    its unit's `Nice=`."""
    import select

    os.nice(nice)
    import django

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
    django.setup()
    api = Agents(os.environ["BENCH_DRYRUN_TOKENS"].split(","))
    for body in bodies(50, seed=1, teams=teams):  # warm up: imports, compiled queries, the first snapshot
        send(api, body)
    print("ready", flush=True)
    sys.stdin.readline()
    shapes = bodies(2000, seed=seed, teams=teams)
    times: list[float] = []
    outcomes = {"admit": 0, "wait": 0}
    started = time.perf_counter()
    while time.perf_counter() - started < seconds:
        if len(times) % 20 == 0 and select.select([sys.stdin], [], [], 0)[0]:
            said = sys.stdin.readline().strip()
            if said == "pause":
                paused = time.perf_counter()
                if sys.stdin.readline().strip() != "go":
                    break  # stdin closed while paused: stop
                started += time.perf_counter() - paused  # (the pause counts neither in the pace nor in the wall)
            elif said != "go":
                break  # stdin closed: stop
        t = time.perf_counter()
        outcomes[send(api, shapes[len(times) % len(shapes)])["outcome"]] += 1
        times.append((time.perf_counter() - t) * 1000)
        ahead = len(times) / rate - (time.perf_counter() - started) if rate else 0
        if ahead > 0:
            time.sleep(ahead)
    wall = time.perf_counter() - started
    print(json.dumps({"times": [round(t, 3) for t in times], "wall": wall, "outcomes": outcomes}), flush=True)


if __name__ == "__main__" and sys.argv[1:2] == ["stream-child"]:
    stream_child(int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6]))
