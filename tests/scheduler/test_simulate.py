"""The simulator replays a trace through decide() under a virtual clock; tests make their own small traces."""

from __future__ import annotations

import csv
import json
import random
import subprocess
import sys
from pathlib import Path

from scheduler import decide
from scheduler.model import Decisions, Snapshot
from scheduler.simulate import read_trace, report, simulate

COLUMNS = ["name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli", "gpu_spec", "qos", "pod_phase",
           "creation_time", "deletion_time", "scheduled_time"]  # fmt: skip


def write_trace(path: Path, n: int = 300, seed: int = 7) -> Path:
    """A busy little trace in the openb format: mostly one-GPU tasks, some fractions, a few 8-GPU giants."""
    rnd = random.Random(seed)
    with path.open("w", newline="") as f:
        out = csv.writer(f)
        out.writerow(COLUMNS)
        t = 0
        for i in range(n):
            t += rnd.randint(0, 120)
            gpus, milli = rnd.choice([(1, 1000)] * 6 + [(1, 250), (1, 500), (8, 1000), (2, 1000)])
            runtime = rnd.choice([60, 300, 900, 3600, 4 * 3600])
            out.writerow([f"task-{i:04d}", 4000, 8192, gpus, milli, "", "LS", "Running", t, t + 5 + runtime, t + 5])
        out.writerow(["never-ran", 4000, 8192, 1, 1000, "", "LS", "Pending", t, t + 50, ""])
    return path


def test_tasks_are_read_with_their_runtime_and_a_stable_group(tmp_path):
    tasks = read_trace(str(write_trace(tmp_path / "t.csv")), groups=4)
    assert len(tasks) == 300  # the task deleted before it ran is left out
    assert tasks[0].arrival == 0
    assert all(t.runtime > 0 for t in tasks)
    assert {t.group for t in tasks} == {0, 1, 2, 3}
    assert read_trace(str(tmp_path / "t.csv"), groups=4) == tasks


def test_gridlane_waits_less_than_fifo_keeps_utilisation_and_honours_reservations(tmp_path):
    tasks = read_trace(str(write_trace(tmp_path / "t.csv")), groups=4)
    fifo = report(simulate(tasks, policy="fifo", groups=4, gpus=16), 16)["overall"]
    ours = report(simulate(tasks, policy="gridlane", groups=4, gpus=16), 16)["overall"]
    assert ours["tasks"] == fifo["tasks"] == 300
    assert ours["mean_wait_s"] < fifo["mean_wait_s"]
    assert ours["utilisation"] >= fifo["utilisation"] - 0.02
    assert ours["reservation_violations"] == 0
    assert ours["gang_violations"] == 0


def test_the_command_line_prints_json_per_group_and_overall(tmp_path):
    trace = write_trace(tmp_path / "t.csv", n=60)
    result = subprocess.run(
        [sys.executable, "-m", "scheduler.simulate", "--trace", str(trace), "--policy", "gridlane", "--groups", "3",
         "--gpus", "8", "--json"],
        capture_output=True, text=True, check=True, cwd=Path(__file__).resolve().parents[2],
    )  # fmt: skip
    data = json.loads(result.stdout)
    assert set(data["groups"]) == {"0", "1", "2"}
    for key in ("mean_wait_s", "p95_wait_s", "utilisation", "reservation_violations", "gang_violations"):
        assert key in data["overall"]


def test_the_simulated_teams_carry_their_decayed_use_into_fair_share(tmp_path):
    """As the worker's snapshots do: a team that has run work has use (U) and every team an allocation (L)."""
    tasks = read_trace(str(write_trace(tmp_path / "t.csv", n=60)), groups=2)
    seen: list[Snapshot] = []

    def recording(snapshot: Snapshot) -> Decisions:
        seen.append(snapshot)
        return decide(snapshot)

    simulate(tasks, policy=recording, groups=2, gpus=8)
    assert seen[0].usage == {}  # nothing has run yet
    assert seen[-1].shares == {0: 2.0, 1: 2.0}  # half the pool reserved, the rest shared by weight: 2 GPUs each
    assert any(s.usage.get(0, 0) > 0 and s.usage.get(1, 0) > 0 for s in seen)
