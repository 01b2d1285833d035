"""The policy engine inside the worker: reservations come back by preemption, reasons and estimates are
stored, the snapshot and the apply step take a bounded number of queries, /metrics reports it all."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from portal.queues.models import Queue, Quota
from portal.worker import snapshot, tasks, usage
from portal.worker.models import GroupUsage
from portal.workloads.models import Workload
from portal.workloads.states import State
from scheduler import reasons
from tests.conftest import wait_until

pytestmark = pytest.mark.usefixtures("local_jobs")  # tests/conftest.py


def states(*workloads):
    return [Workload.objects.get(pk=w.pk).state for w in workloads]


def test_fraud_reserves_4_gpus_vision_fills_the_pool_fraud_submits_and_runs_within_one_cycle(alice, charlie, submit):
    Queue.objects.filter(slug="train").update(preemptible=True)
    Quota.objects.filter(group__slug="fraud").update(gpu_reservation_milli=4000)
    Quota.objects.filter(group__slug="vision").update(gpu_limit_milli=None)  # vision may borrow the whole pool
    vision = [submit(alice, name=f"v{i}", command="sleep 300", gpus=1) for i in range(8)]
    tasks.cycle()
    wait_until(lambda: (tasks.cycle(), all(s == State.RUNNING for s in states(*vision)))[1])

    fraud = submit(charlie, name="fraud-train", command="sleep 300", gpus=4)
    summary = tasks.cycle()

    assert summary["admitted"] == 1
    assert summary["preempted"] == 4
    assert Workload.objects.get(pk=fraud.pk).state in (State.DISPATCHING, State.RUNNING)
    preempted = {w.name for w in Workload.objects.filter(state=State.PREEMPTED)}
    newest = {w.name for w in Workload.objects.filter(name__startswith="v").order_by("-started_at")[:4]}
    assert preempted == newest  # the borrowers that started last
    # Their jobs are stopped, then they wait in line again, with their history and a fresh run id.
    wait_until(lambda: (tasks.cycle(), Workload.objects.filter(state=State.PREEMPTED).count() == 0)[1])
    back = Workload.objects.get(name=sorted(preempted)[-1])
    assert back.state == State.PENDING
    assert back.attempt == 1
    assert back.run_id != back.pk
    assert [e.to_state for e in back.events.all()] == [
        "pending", "admitted", "dispatching", "running", "preempted", "pending"]  # fmt: skip
    assert back.pending_reason_code in (reasons.HELD_FOR_RESERVATIONS, reasons.NO_CAPACITY)


def test_waiting_work_gets_a_reason_and_an_estimated_start(alice, submit):
    Quota.objects.filter(group__slug="vision").update(gpu_limit_milli=None)
    running = submit(alice, name="big", command="sleep 300", gpus=8, runtime_limit_minutes=30)
    tasks.cycle()
    waiting = submit(alice, name="next", command="true", gpus=2)
    tasks.cycle()
    waiting.refresh_from_db()
    running.refresh_from_db()
    assert waiting.pending_reason_code == reasons.NO_CAPACITY
    assert "Waiting for capacity on local" in waiting.pending_reason
    started = running.started_at or running.admitted_at
    assert abs((waiting.estimated_start - (started + timedelta(minutes=30))).total_seconds()) < 5


def test_a_cycle_takes_the_same_number_of_queries_for_5_or_50_pending(alice, submit):
    quota = Quota.objects.filter(group__slug="vision")

    def queries_for_a_cycle():
        with CaptureQueriesContext(connection) as ctx:
            tasks.cycle()
        return len(ctx.captured_queries)

    for i in range(5):
        submit(alice, name=f"a{i}", gpus=1)
    # Nothing is admitted: all wait (set after submitting: a submit refuses work over a limit of 0).
    quota.update(gpu_limit_milli=0)
    queries_for_a_cycle()  # the first cycle writes their reasons
    five = queries_for_a_cycle()
    quota.update(gpu_limit_milli=6000)
    for i in range(45):
        submit(alice, name=f"b{i}", gpus=1)
    quota.update(gpu_limit_milli=0)
    queries_for_a_cycle()
    assert queries_for_a_cycle() == five


def test_many_admissions_are_written_in_bulk(alice, submit, django_assert_max_num_queries):
    Quota.objects.filter(group__slug="vision").update(gpu_limit_milli=None)
    for i in range(40):
        submit(alice, name=f"q{i}", gpus=0.1, cpus=0.1, memory_gb=1)
    from portal.worker import apply
    from scheduler import decide

    snap, rows = snapshot.build(timezone.now())
    decisions = decide(snap)
    assert len(decisions.admit) == 40
    # targets, two savepoints and their releases, lock the rows, one update, one insert of all the events
    with django_assert_max_num_queries(8):
        assert apply.apply(decisions, rows).admitted == 40


def test_decayed_usage_rises_while_gpus_run_and_halves_each_half_life(alice, submit, settings):
    settings.GRIDLANE_FAIR_SHARE_HALF_LIFE_HOURS = 1
    w = submit(alice, gpus=2)
    Workload.objects.filter(pk=w.pk).update(state=State.RUNNING, started_at=timezone.now())
    start = timezone.now()
    usage.bring_forward(start)
    usage.bring_forward(start + timedelta(minutes=30))
    row = GroupUsage.objects.get(group=w.group)
    assert row.decayed_gpu_seconds == pytest.approx(2 * 1800)
    Workload.objects.filter(pk=w.pk).update(state=State.SUCCEEDED)
    usage.bring_forward(start + timedelta(minutes=90))
    row.refresh_from_db()
    assert row.decayed_gpu_seconds == pytest.approx(2 * 1800 / 2)


def test_metrics_report_workloads_cycles_and_queue_wait(client, alice, submit):
    submit(alice, name="m1", command="true")
    tasks.cycle()
    wait_until(lambda: (tasks.cycle(), Workload.objects.get().state == State.SUCCEEDED)[1])
    submit(alice, name="m2", command="true", gpus=100 / 1000)
    body = client.get("/metrics").content.decode()
    assert 'gridlane_workloads{group="vision",queue="train",state="pending"} 1.0' in body
    assert "gridlane_cycles_total" in body
    assert "gridlane_admissions_total 1.0" in body
    assert 'gridlane_queue_wait_seconds_count{group="vision"} 1.0' in body
    assert 'gridlane_queue_wait_seconds_bucket{group="vision",le="+Inf"} 1.0' in body


def test_an_agent_at_its_own_gpu_limit_waits_while_its_team_has_room(agent, submit):
    from portal.accounts.models import ServiceIdentity

    ServiceIdentity.objects.filter(pk=agent.pk).update(gpu_limit_milli=1000)
    Quota.objects.filter(group__slug="vision").update(gpu_limit_milli=None)
    first = submit(agent.user, name="a1", gpus=1, command="sleep 300")
    second = submit(agent.user, name="a2", gpus=1, command="sleep 300")
    tasks.cycle()
    first.refresh_from_db()
    second.refresh_from_db()
    assert first.state != State.PENDING
    assert second.pending_reason_code == reasons.OWNER_AT_LIMIT
    assert "1 of 1 GPUs in use" in second.pending_reason


def test_a_cycle_considers_the_oldest_few_of_each_teams_queue_and_class(alice, charlie, submit, settings):
    settings.GRIDLANE_CANDIDATES_PER_QUEUE = 2
    mine = [submit(alice, name=f"a{i}") for i in range(4)]
    urgent = submit(alice, name="urgent", priority="low")
    theirs = [submit(charlie, name=f"c{i}") for i in range(3)]
    snap, _ = snapshot.build(timezone.now())
    considered = {j.id for j in snap.pending}
    assert considered == {str(w.pk) for w in (*mine[:2], urgent, *theirs[:2])}


def test_a_member_cap_holds_one_person_back_while_a_teammate_runs(alice, bob, agent, submit):
    from portal.accounts.models import ResourceGroup, ServiceIdentity

    ResourceGroup.objects.filter(slug="vision").update(member_gpu_limit_milli=2000)
    Quota.objects.filter(group__slug="vision").update(gpu_limit_milli=None)
    mine = [submit(alice, name=f"a{i}", gpus=1, command="sleep 300") for i in range(3)]
    bobs = submit(bob, name="b0", gpus=1, command="sleep 300")
    ServiceIdentity.objects.filter(pk=agent.pk).update(gpu_limit_milli=3000)
    agents = submit(agent.user, name="ag", gpus=3, command="sleep 300")  # an agent: its own limit, not the member cap
    tasks.cycle()
    assert states(*mine[:2], bobs, agents).count(State.PENDING) == 0
    third = Workload.objects.get(pk=mine[2].pk)
    assert third.pending_reason_code == reasons.MEMBER_AT_LIMIT
    assert "2 of 2 GPUs in use" in third.pending_reason


def test_a_queue_s_share_of_the_pool_caps_its_work_and_says_so(alice, charlie, submit):
    Queue.objects.filter(slug="train").update(gpu_share_percent=25)  # the demo pool has 8 GPUs: 2 for train
    Quota.objects.filter(group__slug__in=["vision", "fraud"]).update(gpu_limit_milli=None)
    first = submit(alice, name="t0", gpus=1, command="sleep 300")
    second = submit(charlie, name="t1", gpus=1, command="sleep 300")
    third = submit(alice, name="t2", gpus=1, command="sleep 300")
    tasks.cycle()
    assert states(first, second).count(State.PENDING) == 0
    waiting = Workload.objects.get(pk=third.pk)
    assert waiting.pending_reason_code == reasons.QUEUE_AT_SHARE
    assert "25 %" in waiting.pending_reason


def test_an_agent_s_reservation_is_owed_to_it_when_its_teammates_fill_the_team_s(alice, agent, submit, settings):
    from portal.accounts.models import ServiceIdentity

    Queue.objects.filter(slug="train").update(preemptible=True)
    Quota.objects.filter(group__slug="vision").update(gpu_reservation_milli=4000, gpu_limit_milli=None)
    ServiceIdentity.objects.filter(pk=agent.pk).update(gpu_reservation_milli=2000)
    snap, _ = snapshot.build(timezone.now())
    assert snap.owner_reservations == {agent.user_id: 2000}
    assert agent.user_id in snap.agents
    ServiceIdentity.objects.filter(pk=agent.pk).update(disabled_at=timezone.now())
    snap, _ = snapshot.build(timezone.now())
    assert snap.owner_reservations == {}  # a disabled agent is owed nothing


def test_a_department_s_limit_caps_its_teams_together_and_the_reason_names_the_department(alice, charlie, submit):
    from portal.accounts.models import ResourceGroup
    from portal.queues.models import Fabric

    research = ResourceGroup.objects.create(slug="research", name="Research")
    ResourceGroup.objects.filter(slug__in=["vision", "fraud"]).update(parent=research)
    Quota.objects.filter(group__slug__in=["vision", "fraud"]).update(gpu_reservation_milli=0, gpu_limit_milli=None)
    Quota.objects.create(group=research, fabric=Fabric.objects.get(name="local"), gpu_limit_milli=3000)
    theirs = [
        submit(alice, name="v0", gpus=1, command="sleep 300"),
        submit(charlie, name="f0", gpus=1, command="sleep 300"),
    ]
    more = [
        submit(alice, name="v1", gpus=1, command="sleep 300"),
        submit(charlie, name="f1", gpus=1, command="sleep 300"),
    ]
    snap, _ = snapshot.build(timezone.now())
    assert snap.parents == {ResourceGroup.objects.get(slug=s).pk: research.pk for s in ("vision", "fraud")}
    assert research.pk not in snap.shares  # a department runs nothing of its own: no share of its own
    tasks.cycle()
    assert states(*theirs).count(State.PENDING) == 0
    waiting = [w for w in Workload.objects.filter(pk__in=[m.pk for m in more]) if w.state == State.PENDING]
    assert len(waiting) == 1
    assert waiting[0].pending_reason_code == reasons.DEPARTMENT_AT_LIMIT
    assert "Your department is at its limit on local" in waiting[0].pending_reason
