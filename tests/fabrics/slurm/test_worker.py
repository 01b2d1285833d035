"""The portal's worker end to end on the real Slurm cluster: submit -> cycle -> sbatch -> squeue -> done."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from fabrics.base import JobState
from fabrics.slurm.fabric import SlurmFabric
from portal.accounts.models import ResourceGroup
from portal.queues.models import Fabric
from portal.worker import apply, connections, snapshot, tasks
from portal.worker.dispatch import job_spec
from portal.workloads import services
from portal.workloads.models import Workload
from portal.workloads.states import State
from scheduler import decide, reasons
from tests.conftest import wait_until
from tests.fabrics.slurm.conftest import fabric_behind_queue, jobs_named


@pytest.fixture
def hpc(cast: dict[str, Any], cluster_lock: None, slurm_settings: dict[str, Any]) -> Iterator[Fabric]:
    """A Slurm fabric behind a queue `hpc` that both teams may use."""
    connections.forget_all()
    fabric = fabric_behind_queue(
        slurm_settings, groups=ResourceGroup.objects.filter(slug__in=["vision", "fraud"]),
        slug="hpc", name="HPC", kinds=["training", "batch"], default_runtime_minutes=10, max_runtime_minutes=60,
    )  # fmt: skip
    yield fabric
    connections.forget_all()


def run_until(workload: Workload, *states: State, timeout: float = 60) -> Workload:
    def reached() -> bool:
        tasks.cycle()
        workload.refresh_from_db()
        return workload.state in states

    wait_until(reached, timeout=timeout, every=0.3)
    return workload


def adapter(fabric: Fabric) -> SlurmFabric:
    slurm = connections.fabric_for(fabric)
    assert isinstance(slurm, SlurmFabric)
    return slurm


def test_a_workload_runs_on_slurm_to_success_with_its_gpus_and_output(alice, submit, hpc):
    workload = submit(alice, queue="hpc", command='echo "gpus=$CUDA_VISIBLE_DEVICES"', gpus=2, memory_gb=1)
    run_until(workload, State.SUCCEEDED)
    assert workload.exit_code == 0
    assert workload.external_id.isdigit()
    assert workload.fabric == hpc
    assert f"#SBATCH --comment=gridlane:{workload.run_id}" in workload.rendered
    assert "#SBATCH --gres=gpu:2" in workload.rendered
    assert len(workload.log_tail.strip().removeprefix("gpus=").split(",")) == 2
    steps = list(workload.events.values_list("to_state", flat=True))
    assert steps == ["pending", "admitted", "dispatching", "running", "succeeded"]


def test_a_failing_workload_fails_with_its_exit_code(alice, submit, hpc):
    workload = submit(alice, queue="hpc", command="echo bad input >&2; exit 3", memory_gb=1)
    run_until(workload, State.FAILED)
    assert workload.exit_code == 3
    assert "bad input" in workload.log_tail


def test_cancel_in_gridlane_cancels_the_slurm_job(alice, submit, hpc):
    workload = submit(alice, queue="hpc", command="sleep 300", memory_gb=1)
    run_until(workload, State.RUNNING)
    services.do_cancel(alice, workload)
    run_until(workload, State.CANCELLED)
    assert adapter(hpc).poll([workload.external_id])[workload.external_id].state is JobState.CANCELLED


def test_a_worker_that_died_after_sbatch_reconciles_instead_of_submitting_twice(alice, submit, hpc):
    workload = submit(alice, queue="hpc", command="echo once", memory_gb=1)
    # A worker admits it, records its intent, runs sbatch... and dies before saving the job id.
    snap, rows = snapshot.build(workload.submitted_at)
    apply.apply(decide(snap), rows)
    workload.refresh_from_db()
    assert services.transition(workload, State.DISPATCHING, reason="dispatching to hpc")
    loaded = Workload.objects.select_related("owner", "group", "queue", "target").get(pk=workload.pk)
    external_id = adapter(hpc).submit(job_spec(loaded))
    assert Workload.objects.get(pk=workload.pk).external_id == ""

    # The restarted worker finds the job by its tag and follows it.
    run_until(workload, State.SUCCEEDED)
    assert workload.external_id == external_id
    assert jobs_named(adapter(hpc), workload.run_id) == {workload.run_id: [external_id]}


@pytest.fixture
def controller_outage(cluster: dict[str, Any]) -> Iterator[Callable[[str], None]]:
    """ctl("stop-controller") / ctl("start-controller"); the controller is back after the test whatever happens."""

    def ctl(action: str) -> None:
        subprocess.run(["bash", cluster["ctl"], action], check=True, timeout=60)

    yield ctl
    ctl("start-controller")


def test_a_stopped_controller_makes_work_wait_and_then_it_resumes(alice, bob, submit, hpc, controller_outage):
    running = submit(alice, queue="hpc", command="sleep 4; echo survived", memory_gb=1)
    run_until(running, State.RUNNING)

    controller_outage("stop-controller")
    waiting = submit(bob, queue="hpc", command="echo after", memory_gb=1)
    tasks.cycle()  # the poll fails (the fabric is marked unavailable), then the scheduler decides
    hpc.refresh_from_db()
    assert not hpc.healthy
    # The poll says it ("does not answer"), and so does the capacity step's sinfo when it is due in the same
    # cycle (on a slow machine it is), which writes last: either names the controller it cannot reach.
    assert "does not answer" in hpc.health_detail or "Unable to contact slurm controller" in hpc.health_detail
    running.refresh_from_db()
    assert running.state == State.RUNNING  # nothing fails while the controller is away
    waiting.refresh_from_db()
    assert waiting.state == State.PENDING
    assert waiting.pending_reason_code == reasons.FABRIC_UNAVAILABLE

    controller_outage("start-controller")
    started = time.monotonic()
    run_until(running, State.SUCCEEDED, timeout=90)
    print(f"running job followed {time.monotonic() - started:.1f} s after the controller came back")
    run_until(waiting, State.SUCCEEDED, timeout=90)
    assert "survived" in running.log_tail
    hpc.refresh_from_db()
    assert hpc.healthy
