"""The autoscaler's step against moto's EC2 through real boto3: budgets, capacity fallback, throttling, a
worker killed mid-launch, instances nobody recorded, and the pool's bad input."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid
from datetime import timedelta
from decimal import Decimal

import boto3
import pytest
from django.core.exceptions import ValidationError
from django.db import connection
from django.utils import timezone

from portal.agents.models import AgentHost, Claim
from portal.burst import autoscale
from portal.burst.models import BurstPool, Cooldown, Decision, Instance
from portal.queues.models import Fabric
from portal.worker import capacity, tasks
from portal.workloads.models import Workload
from portal.workloads.states import State
from scheduler import burst
from tests.burst.conftest import ROOT
from tests.cloud.conftest import IMAGE, KEYS, REGION
from tests.cloud.ec2_double import Rule

pytestmark = pytest.mark.django_db(transaction=True)


def waiting_for_capacity(alice, submit, n: int = 1, gpus: int = 1) -> list:
    """Work in `burstable` that the scheduler says waits for capacity (on-premises has no agent online)."""
    capacity.observe(Fabric.objects.get(name="onprem"), timezone.now())
    work = [submit(alice, queue="burstable", gpus=gpus, cpus=2, memory_gb=8, name=f"w{i}") for i in range(n)]
    tasks.admit()
    for w in work:
        w.refresh_from_db()
        assert (w.state, w.pending_reason_code) == (State.PENDING, "no_capacity")
    return work


def cloud(moto_url: str, pool: str) -> dict[str, str]:
    client = boto3.client("ec2", region_name=REGION, endpoint_url=moto_url, aws_access_key_id=KEYS.key_id,
                          aws_secret_access_key=KEYS.secret)  # fmt: skip
    answer = client.describe_instances(Filters=[{"Name": "tag:gridlane:pool", "Values": [pool]}])
    return {i["InstanceId"]: i["State"]["Name"] for r in answer["Reservations"] for i in r["Instances"]}


def messages(pool: BurstPool, action: str) -> list[str]:
    return list(
        Decision.objects.filter(pool=pool, action=action).order_by("at", "pk").values_list("message", flat=True)
    )


def test_no_launch_past_the_hourly_budget_and_the_reason_is_shown(alice, submit, burst_pool, moto_url, step):
    BurstPool.objects.filter(pk=burst_pool.pk).update(budget_per_hour=Decimal("1.50"))
    waiting_for_capacity(alice, submit, n=2)
    step()
    assert len(cloud(moto_url, burst_pool.name)) == 1  # 1.006/h fits in 1.50/h; a second would not
    assert messages(burst_pool, "hold") == [
        "1 waiting workloads of team vision wait: launching g5.xlarge (1.01/h) would take the pool to 2.01/h, "
        "over its budget of 1.50/h"
    ]
    step()  # the same hold is not written again every step
    assert len(messages(burst_pool, "hold")) == 1
    assert len(cloud(moto_url, burst_pool.name)) == 1


def test_no_capacity_for_the_cheapest_type_in_any_zone_falls_back_to_the_next(
    alice, submit, burst_pool, ec2, moto_url, step
):
    ec2.rules.append(Rule({"Action": "RunInstances", "InstanceType": "g5.xlarge"}, code="InsufficientInstanceCapacity"))
    waiting_for_capacity(alice, submit)
    step()
    inst = Instance.objects.get(pool=burst_pool)
    assert (inst.instance_type, inst.state, inst.zone) == ("g5.2xlarge", "booting", f"{REGION}a")
    assert list(cloud(moto_url, burst_pool.name).values()) == ["running"]
    (launched,) = messages(burst_pool, "launch")
    assert launched.startswith(
        "launched g5.2xlarge for 1 waiting workload of team vision: 1 GPUs pending for 0 min (after no capacity for "
        f"g5.xlarge in {REGION}a (InsufficientInstanceCapacity), g5.xlarge in {REGION}b (InsufficientInstanceCapacity))"
    )


def test_no_capacity_in_the_first_zone_falls_back_to_the_next_zone(alice, submit, burst_pool, ec2, step):
    ec2.rules.append(Rule({"Action": "RunInstances", "Placement.AvailabilityZone": f"{REGION}a"}, code="Unsupported"))
    waiting_for_capacity(alice, submit)
    step()
    inst = Instance.objects.get(pool=burst_pool)
    assert (inst.instance_type, inst.zone, inst.state) == ("g5.xlarge", f"{REGION}b", "booting")


def test_a_zone_with_no_capacity_is_kept_off_in_the_database_until_its_cooldown_ends(
    alice, submit, burst_pool, ec2, step
):
    ec2.rules.append(Rule({"Action": "RunInstances", "Placement.AvailabilityZone": f"{REGION}a"},
                          code="InsufficientInstanceCapacity"))  # fmt: skip
    _, second = waiting_for_capacity(alice, submit, n=2)
    Workload.objects.filter(pk=second.pk).update(state=State.CANCELLED)  # one launch now, the other later
    step()
    (cooldown,) = Cooldown.objects.filter(pool=burst_pool)
    assert (cooldown.instance_type, cooldown.zone, cooldown.why, cooldown.code) == (
        "g5.xlarge",
        f"{REGION}a",
        "capacity",
        "InsufficientInstanceCapacity",
    )
    assert timedelta(minutes=9) < cooldown.until - timezone.now() <= autoscale.CAPACITY_COOLDOWN
    # The zone has capacity again, but the state outlives the worker's memory: a restarted or second worker
    # (each step reads it afresh) keeps off it until the cooldown ends.
    ec2.rules.clear()
    Workload.objects.filter(pk=second.pk).update(state=State.PENDING)
    step()
    assert sorted(Instance.objects.filter(pool=burst_pool).values_list("zone", flat=True)) == [f"{REGION}b"] * 2
    Instance.objects.filter(pool=burst_pool).update(state="gone")
    step(later=autoscale.CAPACITY_COOLDOWN + timedelta(seconds=1))  # over: tried again, and the row goes
    assert not Cooldown.objects.filter(pool=burst_pool).exists()
    assert Instance.objects.filter(pool=burst_pool, zone=f"{REGION}a").exists()


def test_work_the_scheduler_expects_to_start_on_premises_soon_launches_nothing(alice, submit, burst_pool, step):
    (work,) = waiting_for_capacity(alice, submit)
    Workload.objects.filter(pk=work.pk).update(estimated_start=timezone.now() + timedelta(minutes=5))
    step()
    assert not Instance.objects.filter(pool=burst_pool).exists()
    assert messages(burst_pool, "hold") == [
        "1 waiting workloads are expected to start where they wait within 10 min: not bursting for them"
    ]
    Workload.objects.filter(pk=work.pk).update(estimated_start=timezone.now() + timedelta(minutes=45))
    step()
    assert Instance.objects.filter(pool=burst_pool).count() == 1


def test_throttling_keeps_the_intent_and_the_next_step_launches_it_once(alice, submit, burst_pool, ec2, moto_url, step):
    ec2.rules.append(Rule({"Action": "RunInstances"}, code="RequestLimitExceeded"))
    waiting_for_capacity(alice, submit)
    step()
    inst = Instance.objects.get(pool=burst_pool)
    assert (inst.state, inst.provider_id) == ("pending", "")
    assert (
        "did not launch now, trying again at the next step: EC2 RequestLimitExceeded" in messages(burst_pool, "fail")[0]
    )
    ec2.rules.clear()
    step()
    inst.refresh_from_db()
    assert inst.state == "booting"
    assert list(cloud(moto_url, burst_pool.name)) == [inst.provider_id]
    assert Instance.objects.filter(pool=burst_pool).count() == 1


def test_a_worker_killed_between_the_launch_request_and_recording_it_does_not_launch_twice(
    alice, submit, burst_pool, ec2, moto_url, step, tmp_path
):
    waiting_for_capacity(alice, submit)
    ec2.rules.append(Rule({"Action": "RunInstances"}))  # forward to EC2, then hold the answer
    db = connection.settings_dict
    env = {**os.environ, "DATABASE_URL": f"postgres://{db['USER']}@{db['HOST']}:{db['PORT'] or 5432}/{db['NAME']}",
           "DJANGO_SETTINGS_MODULE": "tests.settings"}  # fmt: skip
    with (tmp_path / "worker.log").open("w") as out:
        worker = subprocess.Popen([sys.executable, str(ROOT / "manage.py"), "burst_step"], env=env, stdout=out,
                                  stderr=out, start_new_session=True)  # fmt: skip
    try:
        assert ec2.held.wait(120), (tmp_path / "worker.log").read_text()
        os.killpg(worker.pid, signal.SIGKILL)  # EC2 has launched it; the worker never hears so
    finally:
        worker.wait(timeout=30)
        ec2.release.set()
    (launched_id,) = cloud(moto_url, burst_pool.name)
    inst = Instance.objects.get(pool=burst_pool)
    assert (inst.state, inst.provider_id) == ("pending", "")  # the intent, recorded first

    step()
    inst.refresh_from_db()
    assert (inst.state, inst.provider_id) == ("booting", launched_id)
    assert len(ec2.actions("RunInstances")) == 1
    assert list(cloud(moto_url, burst_pool.name)) == [launched_id]
    assert messages(burst_pool, "launch")[-1].startswith(f"found {launched_id} (g5.xlarge) by its launch tag")
    step()
    assert len(ec2.actions("RunInstances")) == 1


def test_an_instance_nobody_recorded_is_reported_then_terminated_after_the_grace_period(burst_pool, moto_url, step):
    client = boto3.client("ec2", region_name=REGION, endpoint_url=moto_url, aws_access_key_id=KEYS.key_id,
                          aws_secret_access_key=KEYS.secret)  # fmt: skip
    tags = [{"ResourceType": "instance", "Tags": [{"Key": "gridlane:pool", "Value": burst_pool.name}]}]
    stray = client.run_instances(ImageId=IMAGE, InstanceType="g5.xlarge", MinCount=1, MaxCount=1,
                                 TagSpecifications=tags)["Instances"][0]["InstanceId"]  # fmt: skip
    step()
    assert cloud(moto_url, burst_pool.name) == {stray: "running"}
    (reported,) = messages(burst_pool, "orphan")
    assert reported == (f"found {stray} (g5.xlarge) tagged with this pool and no Gridlane record: terminating it in "
                        "15 min unless one turns up")  # fmt: skip
    step(timedelta(minutes=10))
    assert cloud(moto_url, burst_pool.name) == {stray: "running"}
    step(timedelta(minutes=16))
    assert cloud(moto_url, burst_pool.name) == {stray: "terminated"}
    step(timedelta(minutes=17))
    assert Instance.objects.get(provider_id=stray).state == "gone"


def test_an_instance_that_never_enrolls_is_terminated_after_the_boot_timeout(alice, submit, burst_pool, moto_url, step):
    waiting_for_capacity(alice, submit)
    step()
    inst = Instance.objects.get(pool=burst_pool)
    step(timedelta(minutes=16))
    assert cloud(moto_url, burst_pool.name)[inst.provider_id] == "terminated"
    inst.refresh_from_db()
    assert inst.reason == "never enrolled within the boot timeout of 15 min"
    assert Instance.objects.filter(pool=burst_pool).count() == 2  # the work still waits: another is on its way


def test_credentials_that_are_missing_or_refused_say_so_and_launch_nothing(
    alice, submit, burst_pool, ec2, moto_url, step, monkeypatch
):
    waiting_for_capacity(alice, submit)
    monkeypatch.delenv("GLTEST_SECRET_ACCESS_KEY")
    step()
    assert messages(burst_pool, "fail") == [
        "ec2 could not be asked about the pool's instances: GLTEST_ACCESS_KEY_ID and GLTEST_SECRET_ACCESS_KEY are not "
        "both set in the worker's environment"
    ]
    monkeypatch.setenv("GLTEST_SECRET_ACCESS_KEY", KEYS.secret)
    ec2.rules.append(Rule({"Action": "RunInstances"}, code="AuthFailure"))
    step()
    assert messages(burst_pool, "fail")[-1].startswith("ec2 refused the pool's credentials: EC2 AuthFailure")
    assert cloud(moto_url, burst_pool.name) == {}
    assert KEYS.secret not in " ".join(Decision.objects.values_list("message", flat=True))


def test_an_instance_type_the_provider_does_not_know_is_skipped_with_its_reason(alice, submit, burst_pool, step):
    burst_pool.instance_types.filter(name="g5.xlarge").update(name="g99.imaginary")
    waiting_for_capacity(alice, submit)
    step()
    inst = Instance.objects.get(pool=burst_pool, state="booting")
    assert inst.instance_type == "g5.2xlarge"
    assert "(after no capacity for g99.imaginary (InvalidInstanceType.NotFound))" in messages(burst_pool, "launch")[0]


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("budget_per_hour", Decimal(0), "A budget of zero would never let an instance start"),
        ("budget_per_month", Decimal(0), "A budget of zero would never let an instance start"),
        ("credentials", "AKIAIOSFODNN7EXAMPLE", "never the key itself"),
        ("boot_script", "#!/bin/bash\nif then fi {{token}}\n", "The script does not parse"),
        ("boot_script", "#!/bin/bash\necho no token here\n", "must pass {{token}}"),
        ("boot_script", "#cloud-config\nruncmd: [\n{{token}}", "The #cloud-config does not parse"),
        ("boot_script", "echo {{token}}", "must start with #!"),
        ("zones", [], "Give the zones to try"),
    ],
)
def test_bad_pool_settings_are_refused_with_a_clear_error(burst_pool, field, value, message):
    setattr(burst_pool, field, value)
    with pytest.raises(ValidationError, match=message.replace("{", "\\{").replace("}", "\\}")):
        burst_pool.full_clean()


def test_the_plan_hears_each_waiting_workloads_runtime_limit(alice, submit, burst_pool):
    waiting_for_capacity(alice, submit)
    (waiting,), _ = autoscale.demand(burst_pool)
    assert waiting.runtime == timedelta(minutes=60)  # the queue's default runtime


def test_the_room_before_the_pool_is_what_on_premises_has_free_and_none_while_work_waits_for_an_agent(
    alice, submit, burst_pool
):
    from fabrics.base import Resources
    from portal.agents.models import Claim

    onprem = Fabric.objects.get(name="onprem")  # declared with one GPU, never asked: planned as declared
    now = timezone.now()
    assert autoscale.room_before(burst_pool, now) == [Resources(1000, 64_000, 256 * 1024)]
    work = submit(alice, queue="burstable", gpus=1, cpus=2, memory_gb=8, name="on-premises")
    Workload.objects.filter(pk=work.pk).update(state=State.RUNNING, fabric=onprem)
    assert autoscale.room_before(burst_pool, now) == [Resources(0, 62_000, 248 * 1024)]
    # Work admitted to the pool that no agent took yet may land on an idle instance: none may end early.
    Workload.objects.filter(pk=work.pk).update(state=State.PENDING, fabric=None)
    Claim.objects.create(run_id=uuid.uuid4(), workload=work, fabric=burst_pool.fabric, queue="burstable")
    assert autoscale.room_before(burst_pool, now) == []


def test_the_expected_boot_is_the_median_of_the_pools_recent_boots(burst_pool):
    assert autoscale.pool_values(burst_pool, timezone.now()).boot == timedelta(0)  # none booted yet
    launched = timezone.now() - timedelta(hours=1)
    for i, minutes in enumerate((2, 3, 9)):
        Instance.objects.create(pool=burst_pool, instance_type="g5.xlarge", host_name=f"h{i}", requested_at=launched,
                                launched_at=launched, enrolled_at=launched + timedelta(minutes=minutes),
                                state=Instance.State.GONE)  # fmt: skip
    assert autoscale.pool_values(burst_pool, timezone.now()).boot == timedelta(minutes=3)


def test_the_plan_sees_what_runs_on_each_instance_when_it_started_its_limit_and_whether_it_goes_back_in_line(
    alice, submit, burst_pool
):
    (work,) = waiting_for_capacity(alice, submit)
    host = AgentHost.objects.create(fabric=burst_pool.fabric, name="burst-a", gpus=1, cpus=4, memory_mib=16 * 1024)
    inst = Instance.objects.create(pool=burst_pool, instance_type="g5.xlarge", state=Instance.State.BUSY,
                                   host_name=host.name, gpus=1, cpus=4, memory_gib=16)  # fmt: skip
    idle = Instance.objects.create(pool=burst_pool, instance_type="g5.xlarge", state=Instance.State.IDLE,
                                   host_name="burst-b", gpus=1, cpus=4, memory_gib=16)  # fmt: skip
    started = timezone.now() - timedelta(minutes=10)
    Claim.objects.create(run_id=uuid.uuid4(), workload=work, fabric=burst_pool.fabric, queue="burstable",
                         gpus_milli=1000, state=Claim.ClaimState.RUNNING, host=host, started_at=started)  # fmt: skip
    want = burst.Work(started, timedelta(seconds=work.runtime_limit_s), work.queue.preemptible)
    assert autoscale.running_work(burst_pool, [inst, idle]) == {inst.pk: (want,)}
