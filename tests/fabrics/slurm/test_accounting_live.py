"""Accounting side by side on the real cluster: Gridlane's GPU-hours for a team and what sacct reports for the
team's Slurm account over the same window (portal/worker/accounting.py), shown on the team dashboard."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.template.defaultfilters import floatformat
from django.utils import timezone

from fabrics.slurm.fabric import SlurmFabric
from portal.accounts.models import SchedulerUsage
from portal.worker import accounting, connections
from portal.workloads.states import State
from tests.conftest import wait_until
from tests.fabrics.slurm.conftest import sacct_user_and_account, signed_in
from tests.fabrics.slurm.test_run_as import ALICE
from tests.fabrics.slurm.test_worker import run_until


def test_the_dashboard_shows_gridlanes_gpu_hours_beside_sacct_and_they_agree(alice, client, submit, mapped_hpc):
    signed_in(alice, ALICE)
    began = timezone.now()
    jobs = [
        submit(alice, queue="hpc", name="two", command="sleep 3", gpus=2, memory_gb=1),
        submit(alice, queue="hpc", name="one", command="sleep 2", gpus=1, memory_gb=1),
    ]
    for workload in jobs:
        run_until(workload, State.SUCCEEDED)
        assert sacct_user_and_account(workload.external_id) == [ALICE, "gl-vision"]
    now = timezone.now()
    window = now - began + timedelta(seconds=30)
    # slurmdbd answers a window's query for a job a little after it knows the job (later still on a busy
    # machine, where a query by job id already finds it): wait until it does, as the worker's next look would.
    slurm = connections.fabric_for(mapped_hpc)
    assert isinstance(slurm, SlurmFabric)
    names = {f"gl-{w.run_id}" for w in jobs}
    wait_until(lambda: names <= {c.name for c in slurm.account_usage({"gl-vision"}, now - window, now) if c.gpus})
    assert accounting.check(mapped_hpc, now, window=window) == 1

    usage = SchedulerUsage.objects.get(group__slug="vision", fabric=mapped_hpc)
    assert usage.account == "gl-vision"
    want = sum(  # Gridlane's records: GPUs x seconds between the start and end the fabric reported
        w.gpus_milli / 1000 * (w.finished_at - w.started_at).total_seconds() / 3600 for w in jobs
    )
    assert want > 0
    assert usage.gridlane_gpu_hours == pytest.approx(want)
    assert usage.scheduler_gpu_hours == pytest.approx(usage.gridlane_gpu_hours, abs=3 * 2 / 3600)  # 2 s a job
    assert usage.account_gpu_hours >= usage.scheduler_gpu_hours - 1e-9  # others may charge gl-vision too
    assert SchedulerUsage.objects.get(group__slug="fraud", fabric=mapped_hpc).scheduler_gpu_hours == 0
    # By member too: alice's jobs ran as her own POSIX user, and sacct's hours for them agree with Gridlane's.
    [mine] = usage.members
    assert (mine["member"], mine["posix"]) == ("alice", [ALICE])
    assert mine["gridlane"] == pytest.approx(want)
    assert mine["scheduler"] == pytest.approx(mine["gridlane"], abs=3 * 2 / 3600)

    client.force_login(alice)
    page = client.get("/teams/vision/").content.decode()
    assert "sacct, Gridlane&#x27;s jobs" in page or "sacct, Gridlane's jobs" in page
    shown = [floatformat(value, 2) for value in (usage.gridlane_gpu_hours, usage.scheduler_gpu_hours)]
    assert "<td>{}</td><td>{}</td>".format(*shown) in page
    assert f'alice <span class="hint">(sacct: {ALICE})</span>' in page
