"""The whole road for real: submit -> waits for capacity -> the autoscaler launches an instance through boto3
(moto on loopback) -> a real agent boots from its user data and enrolls -> the job runs -> the instance idles
-> it is terminated."""

from __future__ import annotations

from datetime import timedelta

import pytest

from portal.agents.models import AgentHost
from portal.burst.models import Decision, Instance
from portal.workloads.models import Workload
from portal.workloads.states import State
from tests.conftest import wait_until

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def state_of(w: Workload) -> str:
    w.refresh_from_db()
    return w.state


def instance_in(pool, *states: str) -> Instance | None:
    return Instance.objects.filter(pool=pool, state__in=states).first()


def test_waiting_work_runs_on_an_instance_launched_for_it_which_is_terminated_once_idle(
    alice, submit, burst_pool, machines, cycling, step
):
    w = submit(alice, queue="burstable", gpus=1, cpus=2, memory_gb=8, command="echo ran on burst")
    wait_until(lambda: state_of(w) == State.PENDING and w.pending_reason_code == "no_capacity", timeout=60)

    wait_until(lambda: state_of(w) == State.SUCCEEDED, timeout=180, every=0.2)
    inst = Instance.objects.get(pool=burst_pool)
    assert inst.instance_type == "g5.xlarge"  # the cheapest type that holds one GPU
    assert w.host == inst.host_name
    assert "ran on burst" in w.log_tail
    assert AgentHost.objects.get(name=inst.host_name).fabric_id == burst_pool.fabric_id
    launched = Decision.objects.get(pool=burst_pool, action="launch")
    assert launched.message.startswith("launched g5.xlarge for 1 waiting workload of team vision: 1 GPUs pending for")
    assert machines.states() == {inst.provider_id: "running"}
    assert inst.enrollment.used_at is not None

    wait_until(lambda: instance_in(burst_pool, "idle"), timeout=60)
    step(timedelta(minutes=11))  # eleven minutes on, past the pool's limit of ten
    wait_until(lambda: machines.states() == {inst.provider_id: "terminated"}, timeout=30)
    wait_until(lambda: instance_in(burst_pool, "gone"), timeout=60)
    inst.refresh_from_db()
    assert inst.reason.startswith("idle for 1")
    assert "past the pool's limit of 10 min" in inst.reason
    assert inst.gone_at is not None
    assert inst.cost(inst.gone_at) > 0
    assert Decision.objects.filter(pool=burst_pool, action="launch").count() == 1  # nothing launched twice
