"""Pull back and re-route on the real Slurm cluster (portal/worker/pullback.py): another POSIX user (not Gridlane)
fills the GPU node with a plain sbatch job; Gridlane's work waits in Slurm's queue; when a second target of its
queue has room, the work is taken back (its Slurm job gone, never started) and runs once, there. A job that
Slurm starts before it is taken back stays; a worker that stops after the cancel still finishes the move."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from fabrics.base import JobState, Resources
from fabrics.live import Node, from_nodes
from portal.accounts.models import ResourceGroup
from portal.queues.models import Fabric, Queue, QueueTarget
from portal.worker import connections, live, pullback, tasks
from portal.worker.models import Move
from portal.workloads.models import Workload
from portal.workloads.states import State
from tests.conftest import wait_until
from tests.fabrics.slurm.conftest import fabric_behind_queue, jobs_named

OTHER = "gl-charlie"


def _as_other(*argv: str) -> str:
    return subprocess.run(
        ["runuser", "-u", OTHER, "--", *argv], capture_output=True, text=True, check=True, cwd="/tmp", timeout=60
    ).stdout.strip()


def _state(job_id: str) -> str:
    out = subprocess.run(["squeue", "-h", "-t", "all", "-j", job_id, "-o", "%T"], capture_output=True, text=True)
    return out.stdout.strip()


@pytest.fixture
def filled(people: None) -> Iterator[list[str]]:
    """The other user's job holding every GPU of the partition gpu (cancelled at the end)."""
    job_id = _as_other(
        "sbatch", "--parsable", "-A", "gl-fraud", "-p", "gpu", "--gres=gpu:8", "-t", "10", "-o", "/dev/null",
        "--wrap", "sleep 600",
    ).split(";")[0]  # fmt: skip
    ids = [job_id]
    try:
        wait_until(lambda: _state(job_id) == "RUNNING", timeout=180, every=0.5)
        yield ids
    finally:
        subprocess.run(["scancel", *ids], check=False, timeout=60)


@pytest.fixture
def hpc(cast: dict[str, Any], cluster_lock: None, slurm_settings: dict[str, Any]) -> Iterator[Fabric]:
    connections.forget_all()
    fabric = fabric_behind_queue(
        slurm_settings, groups=ResourceGroup.objects.filter(slug__in=["vision", "fraud"]),
        slug="hpc", name="HPC", kinds=["training", "batch"], default_runtime_minutes=10, max_runtime_minutes=60,
    )  # fmt: skip
    yield fabric
    connections.forget_all()


def waiting_in_slurm(alice: Any, submit: Any) -> Workload:
    """A workload of one GPU, dispatched to Slurm and waiting there behind the other user's job."""
    workload = submit(alice, queue="hpc", command="echo moved-once", gpus=1, memory_gb=1)

    def pending_there() -> bool:
        tasks.cycle()
        workload.refresh_from_db()
        return workload.state == State.DISPATCHING and bool(workload.external_id)

    wait_until(pending_there, timeout=60, every=0.3)
    assert _state(workload.external_id) == "PENDING"
    return workload


def second_target_with_room() -> Fabric:
    """The cast's local fabric becomes the queue's second target, and says it has room now."""
    local = Fabric.objects.get(name="local")
    QueueTarget.objects.create(queue=Queue.objects.get(slug="hpc"), fabric=local, order=1)
    node = Node("here", ("",), {"": 8}, {"": 8}, Resources(8000, 16000, 65536))
    live.keep(local.pk, from_nodes([node]), timezone.now())
    return local


def waited(workload: Workload) -> Any:
    """As if the workload had waited in Slurm's queue just past its patience; the time to move it at."""
    now = timezone.now()
    Workload.objects.filter(pk=workload.pk).update(admitted_at=now - pullback.patience() - timedelta(seconds=1))
    return now


def reasons(workload: Workload) -> list[str]:
    return list(workload.events.values_list("reason", flat=True))


def test_work_waiting_in_slurm_moves_to_a_target_with_room_and_runs_once(alice, submit, hpc, filled):
    workload = waiting_in_slurm(alice, submit)
    first_job, first_run = workload.external_id, workload.run_id
    local = second_target_with_room()
    assert pullback.step(timezone.now()) == 0  # not waited past its patience yet
    assert pullback.step(waited(workload)) == 1
    workload.refresh_from_db()
    assert (workload.state, workload.attempt, workload.external_id) == (State.PENDING, 1, "")
    assert any(r.startswith("moving: waited") and "local can start it now" in r for r in reasons(workload))
    assert wait_until(lambda: _state(first_job) in ("CANCELLED", ""), timeout=30)
    assert not Move.objects.exists()

    def ran() -> bool:
        tasks.cycle()
        workload.refresh_from_db()
        return workload.state == State.SUCCEEDED

    wait_until(ran, timeout=90, every=0.3)
    assert workload.fabric == local
    slurm_jobs = jobs_named(connections.fabric_for(hpc), first_run)[first_run]  # type: ignore[arg-type]
    assert slurm_jobs == [first_job]  # the one Slurm job, cancelled: nothing ran twice
    assert jobs_named(connections.fabric_for(hpc), workload.run_id)[workload.run_id] == []  # type: ignore[arg-type]


def test_a_job_slurm_starts_before_it_is_taken_back_stays_and_nothing_is_sent_twice(alice, submit, hpc, filled):
    workload = waiting_in_slurm(alice, submit)
    job = workload.external_id
    second_target_with_room()
    # The gate: the decision to move is taken, then Slurm starts the job before the cancel reaches it.
    subprocess.run(["scancel", filled[0]], check=True, timeout=60)
    wait_until(lambda: _state(job) in ("RUNNING", "COMPLETED", "COMPLETING"), timeout=120, every=0.3)
    assert pullback.step(waited(workload)) == 0
    workload.refresh_from_db()
    assert (workload.state, workload.external_id, workload.attempt) == (State.DISPATCHING, job, 0)
    assert any("move dropped: the job started on hpc first" in r for r in reasons(workload))
    assert not Move.objects.exists()


def test_a_worker_stopped_right_after_the_cancel_finishes_the_move_before_it_reads_status(alice, submit, hpc, filled):
    workload = waiting_in_slurm(alice, submit)
    job = workload.external_id
    local = second_target_with_room()
    # As if killed after steps 1 and 2: the intent recorded, the job cancelled, nothing else.
    Move.objects.create(workload=workload, from_fabric=hpc, external_id=job, to_fabric=local, at=timezone.now())
    connections.fabric_for(hpc).take_back(job)  # type: ignore[attr-defined]
    wait_until(lambda: _state(job) in ("CANCELLED", ""), timeout=30)
    tasks.sync_fabrics()  # a fresh worker's first sync
    workload.refresh_from_db()
    assert (workload.state, workload.attempt) == (State.PENDING, 1)  # moved, not "cancelled outside Gridlane"
    assert not Move.objects.exists()
    assert connections.fabric_for(hpc).poll([job])[job].state is JobState.CANCELLED


def test_a_worker_stopped_right_after_recording_the_intent_takes_the_job_back_on_its_next_run(
    alice, submit, hpc, filled
):
    workload = waiting_in_slurm(alice, submit)
    job = workload.external_id
    local = second_target_with_room()
    # As if killed after step 1: the intent recorded, the job still waiting in Slurm.
    Move.objects.create(workload=workload, from_fabric=hpc, external_id=job, to_fabric=local, at=timezone.now())
    tasks.sync_fabrics()
    workload.refresh_from_db()
    assert (workload.state, workload.attempt) == (State.PENDING, 1)
    assert wait_until(lambda: _state(job) in ("CANCELLED", ""), timeout=30)
    assert not Move.objects.exists()
