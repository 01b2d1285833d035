"""Temporary grants as the scheduler sees them: the snapshot adds an approved grant to the team's quota while
its window holds the clock (frozen here), never one asked for or declined, and the team's extra work runs
with it and waits again once it is over."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
import time_machine
from django.utils import timezone

from portal.accounts.models import ResourceGroup
from portal.queues.models import Fabric, Quota, QuotaGrant
from portal.worker import snapshot, tasks
from portal.workloads.models import Workload
from portal.workloads.states import State
from scheduler import model, reasons
from tests.conftest import wait_until

T0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
HOUR = timedelta(hours=1)


def grant(team: str, gpus: float, start: datetime, end: datetime, state: str = "approved") -> QuotaGrant:
    return QuotaGrant.objects.create(
        team=ResourceGroup.objects.get(slug=team),
        fabric=Fabric.objects.get(name="local"),
        gpus_milli=int(gpus * 1000),
        starts_at=start,
        ends_at=end,
        reason="a deadline",
        state=state,
    )


def gpu_quota(team: str, at: datetime, fabric: str | None = "local") -> tuple[int, int]:
    """(reservation, limit) of the team's GPUs on the fabric in the snapshot built at `at`, in milli-GPUs."""
    group = ResourceGroup.objects.get(slug=team)
    fabric_id = Fabric.objects.get(name=fabric).pk if fabric else None
    with time_machine.travel(at, tick=False):
        snap, _ = snapshot.build(timezone.now())
    quota = snap.quota(group.pk, fabric_id)
    return quota.reservation.gpus_milli, quota.limit.gpus_milli


@pytest.mark.parametrize(
    ("what", "at", "want"),
    [
        ("an hour before it starts: the quota as IT set it", T0 - HOUR, (4000, 6000)),
        ("the moment it starts: 2 GPUs more of both", T0, (6000, 8000)),
        ("in the middle", T0 + HOUR, (6000, 8000)),
        ("the moment it ends: back to the quota", T0 + 2 * HOUR, (4000, 6000)),
        ("a week later", T0 + timedelta(days=7), (4000, 6000)),
    ],
)
def test_an_approved_grant_counts_only_inside_its_window(cast, what, at, want):
    grant("vision", 2, T0, T0 + 2 * HOUR)
    assert gpu_quota("vision", at) == want


@pytest.mark.parametrize("state", ["requested", "declined", "withdrawn"])
def test_a_grant_not_approved_never_counts(cast, state):
    grant("vision", 2, T0, T0 + 2 * HOUR, state=state)
    assert gpu_quota("vision", T0 + HOUR) == (4000, 6000)


def test_a_team_with_no_quota_on_the_fabric_gets_the_grant_as_its_reservation_and_keeps_no_cap(cast):
    Quota.objects.filter(group__slug="fraud").delete()
    grant("fraud", 1.5, T0, T0 + HOUR)
    assert gpu_quota("fraud", T0) == (1500, model.UNLIMITED)


def test_a_team_wide_cap_is_raised_by_as_much_so_that_it_does_not_swallow_the_grant(cast):
    Quota.objects.create(group=ResourceGroup.objects.get(slug="vision"), fabric=None, gpu_limit_milli=6000)
    grant("vision", 2, T0, T0 + HOUR)
    assert gpu_quota("vision", T0, fabric=None)[1] == 8000
    assert gpu_quota("vision", T0 - HOUR, fabric=None)[1] == 6000


def test_fair_share_counts_the_grant_as_reservation_while_it_lasts(cast):
    vision = ResourceGroup.objects.get(slug="vision").pk
    grant("vision", 2, T0, T0 + HOUR)
    with time_machine.travel(T0, tick=False):
        during, _ = snapshot.build(timezone.now())
    with time_machine.travel(T0 + HOUR, tick=False):
        after, _ = snapshot.build(timezone.now())
    assert during.shares[vision] == pytest.approx(6.0)
    assert after.shares[vision] == pytest.approx(4.0)


def states(*workloads):
    return [Workload.objects.get(pk=w.pk).state for w in workloads]


@pytest.mark.usefixtures("local_jobs")
def test_with_a_grant_the_team_s_extra_work_runs_and_after_it_the_limit_is_back(alice, submit):
    """vision's limit is 6 of the pool's 8 GPUs: its 7th and 8th one-GPU jobs wait at the limit until a grant of 2
    starts; once the grant is over, a 9th waits at the limit of 6 again (the 8 running are not stopped)."""
    now = timezone.now()
    jobs = [submit(alice, name=f"j{i}", gpus=1, command="sleep 300") for i in range(8)]
    tasks.cycle()
    assert states(*jobs).count(State.PENDING) == 2
    waiting = Workload.objects.filter(state=State.PENDING).first()
    assert waiting is not None
    assert waiting.pending_reason_code == reasons.GROUP_AT_LIMIT

    granted = grant("vision", 2, now + HOUR, now + 3 * HOUR)
    tasks.cycle()
    assert states(*jobs).count(State.PENDING) == 2  # not yet: it starts in an hour

    with time_machine.travel(granted.starts_at + timedelta(minutes=1)):
        tasks.cycle()
        assert states(*jobs).count(State.PENDING) == 0
        wait_until(lambda: (tasks.cycle(), set(states(*jobs)) == {State.RUNNING})[1])

    with time_machine.travel(granted.ends_at + timedelta(minutes=1)):
        ninth = submit(alice, name="j8", gpus=1, command="sleep 300")
        tasks.cycle()
        ninth.refresh_from_db()
        assert ninth.state == State.PENDING
        assert ninth.pending_reason_code == reasons.GROUP_AT_LIMIT
        assert "8 GPUs of its limit of 6 in use" in ninth.pending_reason
    assert states(*jobs).count(State.RUNNING) == 8


def test_while_a_grant_lasts_the_submit_takes_work_as_big_as_the_raised_limit(alice, submit):
    from portal.workloads.services import SubmitRejected

    with pytest.raises(SubmitRejected, match="where the limit is 6"):
        submit(alice, name="big", gpus=8)
    now = timezone.now()
    grant("vision", 2, now - HOUR, now + HOUR)
    assert submit(alice, name="big", gpus=8).gpus_milli == 8000
    Fabric.objects.filter(name="local").update(gpus_milli=16000)
    with pytest.raises(SubmitRejected, match="where the limit is 8"):
        submit(alice, name="bigger", gpus=9)
