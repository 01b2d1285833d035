"""A worker killed (SIGKILL) at each step of a move, on the real Slurm cluster: the move runs in a process of its
own, held at one step (GRIDLANE_MOVE_GATE, portal.worker.pullback.gate) and killed there; a fresh worker then
finishes or drops it. In the end the workload has run once, on the second target, and its Slurm job was
cancelled without ever starting: one job, never two and never none."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from django.db import connection

from portal.worker import connections, pullback, tasks
from portal.worker.models import Move
from portal.workloads.models import Workload
from portal.workloads.states import State
from tests.conftest import wait_until
from tests.fabrics.slurm.conftest import jobs_named
from tests.fabrics.slurm.test_pullback_live import (
    _state,
    filled,
    hpc,
    second_target_with_room,
    waited,
    waiting_in_slurm,
)

__all__ = ["filled", "hpc"]  # the fixtures this module borrows

ROOT = Path(__file__).resolve().parents[3]
MOVE = """
import django
django.setup()
from django.utils import timezone
from portal.worker import pullback
print("moved", pullback.step(timezone.now()), flush=True)
"""
STEPS = ["intent", "cancel", "confirm", "preempted", "requeued"]  # in the order a move takes them


def killed_at(step: str) -> str:
    """Run a worker's move in a process of its own, held at `step`, and SIGKILL it there; its output."""
    db = connection.settings_dict
    env = {
        **os.environ,
        "DATABASE_URL": f"postgres://{db['USER']}@{db['HOST']}:{db['PORT'] or 5432}/{db['NAME']}",
        "DJANGO_SETTINGS_MODULE": "tests.settings",
        "PYTHONPATH": str(ROOT),
        pullback.GATE_ENV: step,
    }
    worker = subprocess.Popen(
        [sys.executable, "-c", MOVE], cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        start_new_session=True,
    )  # fmt: skip
    assert worker.stdout is not None
    said = []
    for line in worker.stdout:  # until it stands at the gate (or ends without reaching it: the test fails)
        said.append(line)
        if line.strip() == f"gate {step}":
            break
    os.killpg(worker.pid, signal.SIGKILL)
    worker.wait(timeout=30)
    out = "".join(said)
    assert f"gate {step}" in out, out[-3000:]
    return out


@pytest.mark.parametrize("step", STEPS)
def test_a_worker_killed_at_each_step_of_a_move_leaves_one_job(
    transactional_db: Any, step: str, alice: Any, submit: Any, hpc: Any, filled: Any
) -> None:
    workload = waiting_in_slurm(alice, submit)
    first_job, first_run = workload.external_id, workload.run_id
    local = second_target_with_room()
    waited(workload)
    killed_at(step)
    assert Workload.objects.get(pk=workload.pk).state in (State.DISPATCHING, State.PREEMPTED, State.PENDING)

    # A fresh worker: its first sync finishes (or drops) the recorded move before it reads any status.
    def ran() -> bool:
        tasks.cycle()
        return Workload.objects.get(pk=workload.pk).state == State.SUCCEEDED

    wait_until(ran, timeout=120, every=0.3)
    workload.refresh_from_db()
    assert (workload.fabric, workload.attempt) == (local, 1)
    assert not Move.objects.exists()
    slurm = connections.fabric_for(hpc)
    assert jobs_named(slurm, first_run)[first_run] == [first_job]  # type: ignore[arg-type]
    assert jobs_named(slurm, workload.run_id)[workload.run_id] == []  # type: ignore[arg-type]
    assert wait_until(lambda: _state(first_job) in ("CANCELLED", ""), timeout=30)
    assert slurm.poll([first_job])[first_job].host == ""  # it never had a node
