"""Priority tiers IT defines, end to end in the worker: a tier's weight changes who runs first, and a tier that
may preempt takes borrowed capacity from lower tiers where a heavier one without that right waits."""

from __future__ import annotations

import pytest
from django.utils import timezone

from portal.accounts.models import ResourceGroup
from portal.queues.models import PriorityTier, Queue, Quota
from portal.worker import snapshot, tasks
from portal.workloads.models import Workload
from portal.workloads.states import State
from scheduler import reasons
from tests.conftest import wait_until

pytestmark = pytest.mark.usefixtures("local_jobs")  # tests/conftest.py


def states(*workloads):
    return [Workload.objects.get(pk=w.pk).state for w in workloads]


def tier_for_fraud(slug, weight, **fields):
    tier = PriorityTier.objects.create(slug=slug, name=slug.title(), weight=weight, **fields)
    tier.allowed_groups.add(ResourceGroup.objects.get(slug="fraud"))
    return tier


def test_the_snapshot_carries_its_tiers_ranked_by_weight(cast):
    tier_for_fraud("gold", 5, may_preempt=True)
    snap, _ = snapshot.build(timezone.now())
    assert {slug: (t.weight, t.may_preempt, t.rank) for slug, t in snap.tiers.items()} == {
        "low": (0, False, 0), "normal": (1, False, 1), "high": (2, False, 2), "gold": (5, True, 3)}  # fmt: skip


@pytest.mark.parametrize(("tier", "first"), [(None, "older"), ("gold", "gold")])
def test_a_tier_it_defines_puts_newer_work_ahead_of_older(alice, charlie, submit, tier, first):
    """One 8-GPU pool, two 8-GPU jobs: the older runs first, unless the newer one's tier weighs more."""
    Quota.objects.update(gpu_limit_milli=None, gpu_reservation_milli=0)
    if tier:
        tier_for_fraud(tier, 5)
    older = submit(alice, name="older", command="sleep 300", gpus=8)
    newer = submit(charlie, name=tier or "newer", command="sleep 300", gpus=8, priority=tier or "normal")
    tasks.cycle()
    running, waiting = (older, newer) if first == "older" else (newer, older)
    assert states(running)[0] in (State.ADMITTED, State.DISPATCHING, State.RUNNING)
    assert states(waiting) == [State.PENDING]


@pytest.mark.parametrize("may_preempt", [True, False])
def test_a_tier_that_may_preempt_takes_borrowed_gpus_and_one_that_may_not_waits(alice, charlie, submit, may_preempt):
    Queue.objects.filter(slug="train").update(preemptible=True)
    Quota.objects.update(gpu_limit_milli=None, gpu_reservation_milli=0)  # fraud is owed nothing: only its tier
    vision = [submit(alice, name=f"v{i}", command="sleep 300", gpus=1, priority="low") for i in range(8)]
    tasks.cycle()
    wait_until(lambda: (tasks.cycle(), all(s == State.RUNNING for s in states(*vision)))[1])

    tier_for_fraud("urgent", 4, may_preempt=may_preempt)
    urgent = submit(charlie, name="urgent", command="sleep 300", gpus=2, priority="urgent")
    summary = tasks.cycle()

    urgent.refresh_from_db()
    if not may_preempt:
        assert (summary["admitted"], summary["preempted"]) == (0, 0)
        assert urgent.pending_reason_code == reasons.NO_CAPACITY
        return
    assert (summary["admitted"], summary["preempted"]) == (1, 2)
    assert urgent.state in (State.DISPATCHING, State.RUNNING)
    taken = Workload.objects.filter(state=State.PREEMPTED)
    newest = {w.name for w in Workload.objects.filter(name__startswith="v").order_by("-started_at", "-pk")[:2]}
    assert {w.name for w in taken} == newest  # the borrowers that started last
    for workload in taken:
        assert "work of the higher tier urgent needed it" in workload.events.get(to_state=State.PREEMPTED).reason
