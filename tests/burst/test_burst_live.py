"""The whole road for real: submit -> waits for capacity -> the autoscaler launches an instance through boto3
(moto on loopback), or through Nova (Keystone and Nova doubles in process) -> a real agent boots from its user
data and enrolls -> the job runs -> the instance idles -> it is terminated."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest

from portal.agents.models import AgentHost
from portal.burst.models import BurstPool, Decision, Instance
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
    alice, submit, road, cycling, step
):
    burst_pool, machines = road  # EC2 through boto3 and moto, then OpenStack through Keystone and Nova doubles
    cheapest = burst_pool.instance_types.order_by("price_on_demand").first().name
    w = submit(alice, queue="burstable", gpus=1, cpus=2, memory_gb=8, command="echo ran on burst")
    wait_until(lambda: state_of(w) == State.PENDING and w.pending_reason_code == "no_capacity", timeout=60)

    wait_until(lambda: state_of(w) == State.SUCCEEDED, timeout=180, every=0.2)
    inst = Instance.objects.get(pool=burst_pool)
    assert inst.instance_type == cheapest  # the cheapest type that holds one GPU
    assert w.host == inst.host_name
    assert "ran on burst" in w.log_tail
    assert AgentHost.objects.get(name=inst.host_name).fabric_id == burst_pool.fabric_id
    launched = Decision.objects.get(pool=burst_pool, action="launch")
    assert launched.message.startswith(f"launched {cheapest} for 1 waiting workload of team vision: 1 GPUs pending for")
    assert machines.states() == {inst.provider_id: machines.RUNNING}
    assert inst.enrollment.used_at is not None

    wait_until(lambda: instance_in(burst_pool, "idle"), timeout=60)
    step(timedelta(minutes=11))  # eleven minutes on, past the pool's limit of ten
    wait_until(lambda: machines.states().get(inst.provider_id, machines.GONE[-1]) in machines.GONE, timeout=30)
    wait_until(lambda: instance_in(burst_pool, "gone"), timeout=60)
    inst.refresh_from_db()
    assert inst.reason.startswith("idle for 1")
    assert "past the pool's limit of 10 min" in inst.reason
    assert inst.gone_at is not None
    assert inst.cost(inst.gone_at) > 0
    assert Decision.objects.filter(pool=burst_pool, action="launch").count() == 1  # nothing launched twice


def test_a_reclaimed_spot_instance_puts_its_work_back_in_line_and_a_new_instance_runs_it(
    alice, submit, burst_pool, machines, cycling
):
    BurstPool.objects.filter(pk=burst_pool.pk).update(spot=True)
    w = submit(alice, queue="burstable", gpus=1, cpus=2, memory_gb=8,
               command='echo $$ > "$GRIDLANE_JOB_DIR/job.pid"; echo started; sleep 300')  # fmt: skip
    wait_until(lambda: state_of(w) == State.RUNNING, timeout=180, every=0.2)
    first = Instance.objects.get(pool=burst_pool)
    assert first.spot
    assert first.price_per_hour == Decimal("0.4024")  # the spot price of g5.xlarge

    machines.client.terminate_instances(InstanceIds=[first.provider_id])  # the provider takes it back

    # Running again, on another instance: its host is written when that instance's agent claims it.
    wait_until(
        lambda: state_of(w) == State.RUNNING and w.attempt == 1 and bool(w.host) and w.host != first.host_name,
        timeout=240,
        every=0.2,
    )
    first.refresh_from_db()
    assert first.state == "gone"
    assert first.reason.startswith(f"spot instance {first.provider_id} (g5.xlarge) was reclaimed by the provider")
    second = Instance.objects.exclude(pk=first.pk).get(pool=burst_pool)
    assert w.host == second.host_name
    assert list(w.events.values_list("to_state", flat=True)).count("preempted") == 1
    assert Decision.objects.filter(pool=burst_pool, action="replace").count() == 1
