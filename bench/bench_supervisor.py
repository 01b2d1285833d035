"""What supervising local jobs costs: 1,000 prepared jobs run by the local fabric's supervisor, against the same
jobs' scripts run bare, side by side in one run.

    bare        one process starts every job.sh (`bash`, in a process group of its own) and waits for all:
                what running the jobs alone costs, the floor
    supervised  `python -m fabrics.local.supervisor` with all 1,000 job directories, as a dispatch starts them:
                each claimed (flushed to disk before it runs), run, watched and its result recorded

Each reported as jobs/s (to the last result) and the machine's CPU per job (every process: /proc/stat), best of
ROUNDS, alternating. The jobs run `true`, so what is measured is the start and the records, not the work. The
directories live on tmpfs where the machine has one (/dev/shm): creating a file on this machine's disk cost
anywhere from 0.03 to 0.9 ms of CPU from one minute to the next, which would measure the disk, not the
supervisor. GRIDLANE_BENCH_JOBS changes the count.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
N = int(os.environ.get("GRIDLANE_BENCH_JOBS", "1000"))
ROUNDS = 3
SCRIPT = "#!/bin/bash\n: a job of the bench\nexec /bin/bash -c true\n"  # as the default local template renders


def run() -> dict[str, Any]:
    results: dict[str, list[dict[str, float]]] = {"bare": [], "supervised": []}
    for _ in range(ROUNDS):
        for way in results:
            results[way].append(timed(way))
    best = {way: max(rounds, key=lambda r: r["jobs_per_s"]) for way, rounds in results.items()}
    report(best)
    return {"jobs": N, "best": best, "rounds": results}


def timed(way: str) -> dict[str, float]:
    shm = "/dev/shm"  # noqa: S108 (mkdtemp makes a private directory in it)
    base = shm if os.path.isdir(shm) else None
    root = Path(tempfile.mkdtemp(prefix="gridlane-bench-", dir=base))
    try:
        jobdirs = prepare(root)
        cpu, started = machine_cpu(), time.perf_counter()
        if way == "bare":
            bare(jobdirs)
        else:
            supervised(jobdirs)
        seconds = time.perf_counter() - started
        return {"jobs_per_s": round(N / seconds, 1), "cpu_ms_per_job": round((machine_cpu() - cpu) / N * 1000, 2)}
    finally:
        shutil.rmtree(root, ignore_errors=True)


def prepare(root: Path) -> list[Path]:
    """Job directories as LocalFabric.prepare writes them."""
    jobdirs = []
    for i in range(N):
        jobdir = root / f"{i:05d}"
        (jobdir / "work").mkdir(parents=True)
        (jobdir / "job.sh").write_text(SCRIPT)
        (jobdir / "job.sh").chmod(0o700)
        (jobdir / "job.json").write_text(json.dumps({"workload_id": str(i), "runtime_limit_s": 600, "env": {}}))
        jobdirs.append(jobdir)
    return jobdirs


def bare(jobdirs: list[Path]) -> None:
    children = [
        subprocess.Popen(["/bin/bash", str(d / "job.sh")], cwd=d / "work", stdin=subprocess.DEVNULL, process_group=0)
        for d in jobdirs
    ]
    for child in children:
        child.wait()


def supervised(jobdirs: list[Path]) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    launcher = [sys.executable, "-m", "fabrics.local.supervisor", *(str(d) for d in jobdirs)]
    subprocess.run(launcher, env=env, check=True, stdout=subprocess.DEVNULL)  # forks the supervisor, exits
    waiting = list(jobdirs)
    while waiting:
        waiting = [d for d in waiting if not (d / "result.json").exists()]
        time.sleep(0.01)


def machine_cpu() -> float:
    """CPU seconds spent by the whole machine so far (user, nice, system, irq, softirq; not idle nor iowait)."""
    with open("/proc/stat", encoding="ascii") as stat:
        fields = [int(v) for v in stat.readline().split()[1:8]]
    return (sum(fields) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")


def report(best: dict[str, dict[str, float]]) -> None:
    bare_, ours = best["bare"], best["supervised"]
    print(f"\n{N} local jobs (`true`) to their last result, on {os.cpu_count()} CPUs, best of {ROUNDS}:")
    print(f"  {'way':<11} {'jobs/s':>7} {'CPU ms/job':>11}")
    for way, row in best.items():
        print(f"  {way:<11} {row['jobs_per_s']:>7} {row['cpu_ms_per_job']:>11}")
    extra = ours["cpu_ms_per_job"] - bare_["cpu_ms_per_job"]
    pace = ours["jobs_per_s"] / bare_["jobs_per_s"]
    print(f"  supervised at {pace:.2f}x the bare jobs' pace, {extra:.1f} ms of CPU a job for claim, watch and records")
    print(f"load average {os.getloadavg()[0]:.1f}")
