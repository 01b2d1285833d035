"""Extending a lease on the real Slurm cluster. A user may not lengthen a job's time limit, an operator may: the
test cluster's submit account is one (tests/services/slurm/up.sh), so with `extend_time_limit` a running job's
TimeLimit grows to the lease's new end; without the setting the lease ends as planned."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from decimal import Decimal
from typing import Any

import pytest

from fabrics.base import FabricError
from portal.accounts.models import ResourceGroup
from portal.queues.models import Fabric
from portal.worker import connections
from portal.workloads import services
from portal.workloads.models import Workload
from portal.workloads.states import State
from tests.fabrics.slurm.conftest import fabric_behind_queue
from tests.fabrics.slurm.test_worker import adapter, run_until


@pytest.fixture
def boxes(cast: dict[str, Any], cluster_lock: None, slurm_settings: dict[str, Any]) -> Iterator[Fabric]:
    """A Slurm fabric whose account is an operator, behind a VM queue with leases of up to 10 hours."""
    connections.forget_all()
    fabric = fabric_behind_queue(
        slurm_settings | {"extend_time_limit": True}, groups=ResourceGroup.objects.all(),
        slug="hpc-vm", name="HPC boxes", kinds=["vm"], max_runtime_minutes=600,
    )  # fmt: skip
    yield fabric
    connections.forget_all()


def box(submit: Any, user: Any) -> Workload:
    """A one-hour lease running on the cluster."""
    w: Workload = submit(user, queue="hpc-vm", kind="vm", name="box", command="sleep 300", memory_gb=1,
                         lease_hours=Decimal(1), runtime_limit_minutes=60)  # fmt: skip
    return run_until(w, State.RUNNING)


def time_limit(fabric: Fabric, job_id: str) -> str:
    """The job's TimeLimit as squeue prints it (1:00:00), read independently of the fabric's own code."""
    return adapter(fabric).ssh.run(["squeue", "--noheader", "--jobs", job_id, "--format=%l"]).stdout.strip()


def test_an_operator_account_lengthens_a_running_job_to_the_lease_s_new_end(alice, submit, boxes):
    w = box(submit, alice)
    try:
        assert time_limit(boxes, w.external_id) == "1:00:00"
        services.extend(alice, w, Decimal("1.5"))
        assert time_limit(boxes, w.external_id) == "2:30:00"
        w.refresh_from_db()
        assert w.started_at is not None
        assert (w.lease_s, w.lease_ends_at) == (9000, w.started_at + timedelta(hours=2.5))
        assert w.events.last().reason.startswith("lease extended by 1.5 hours: it now ends at ")
    finally:
        services.do_cancel(alice, w)
    run_until(w, State.CANCELLED)
    with pytest.raises(FabricError, match=f"Slurm job {w.external_id} is not running: it is CANCELLED"):
        adapter(boxes).extend(w.external_id, w.started_at + timedelta(hours=3))


def test_without_the_setting_a_running_lease_on_slurm_ends_as_planned(alice, submit, boxes):
    Fabric.objects.filter(pk=boxes.pk).update(settings=boxes.settings | {"extend_time_limit": False})
    connections.forget_all()
    w = box(submit, alice)
    try:
        with pytest.raises(services.CannotExtend, match=r"The fabric hpc \(slurm\) cannot extend a lease: this one"):
            services.extend(alice, w, Decimal(1))
        assert time_limit(boxes, w.external_id) == "1:00:00"
        assert Workload.objects.get(pk=w.pk).lease_s == 3600
    finally:
        services.do_cancel(alice, w)
    run_until(w, State.CANCELLED)
