"""A lead's list of the team's allocations idle now: below 80 % over the last whole window, and since when."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from portal.usage.idle_now import idle_since, team_idle_now
from portal.usage.models import UsageSample
from portal.workloads.models import Workload
from portal.workloads.states import State

T0 = datetime(2026, 11, 30, 10, 0, tzinfo=UTC)
HALF = timedelta(minutes=30)


@pytest.mark.parametrize(
    ("name", "windows", "started", "want"),
    [
        ("busy in the last window: not idle", {T0 - HALF: 10.0, T0: 85.0}, T0 - 4 * HALF, None),
        ("no data in the last window: unknown, not idle", {T0 - HALF: 10.0}, T0 - 4 * HALF, None),
        ("idle three windows after a busy one", {T0 - 3 * HALF: 90.0, T0 - 2 * HALF: 5.0, T0 - HALF: 0.0, T0: 79.0},
         T0 - 4 * HALF, T0 - 2 * HALF),
        ("a gap ends the run: unknown is not idle", {T0 - 2 * HALF: 5.0, T0: 5.0}, T0 - 4 * HALF, T0),
        ("idle since it started, mid-window", {T0 - HALF: 1.0, T0: 1.0}, T0 - HALF + timedelta(minutes=7),
         T0 - HALF + timedelta(minutes=7)),
    ],
)  # fmt: skip
def test_idle_since(name, windows, started, want):
    assert idle_since(windows, T0, HALF, started) == want, name


def running(submit, user, name, gpus=1.0, started=T0 - timedelta(hours=3)):
    w = submit(user, name=name, gpus=gpus)
    Workload.objects.filter(pk=w.pk).update(state=State.RUNNING, started_at=started)
    return w


def sample(w, utilisation, start, end):
    at, rows = start, []
    while at < end:
        rows.append(UsageSample(workload=w, at=at, gpus_milli=1000, gpu_utilisation=utilisation, source="job"))
        at += timedelta(minutes=1)
    UsageSample.objects.bulk_create(rows)


def test_the_team_s_idle_allocations_now_with_owner_and_since_when(
    alice, bob, charlie, submit, django_assert_num_queries
):
    now = T0 + timedelta(minutes=10)  # the last whole window is 09:30-10:00
    lazy = running(submit, alice, "lazy-notebook")
    sample(lazy, 90, T0 - timedelta(hours=3), T0 - timedelta(hours=2))
    sample(lazy, 3, T0 - timedelta(hours=2), now)  # idle for the last two hours
    busy = running(submit, bob, "busy-training", gpus=2)
    sample(busy, 97, T0 - timedelta(hours=3), now)
    running(submit, alice, "no-sampler")  # unknown: never listed as idle
    fraud = running(submit, charlie, "fraud-idle", gpus=1)
    sample(fraud, 0, T0 - timedelta(hours=3), now)

    from portal.accounts.models import ResourceGroup

    vision = ResourceGroup.objects.get(slug="vision")
    with django_assert_num_queries(2):
        idle = team_idle_now(vision, now)
    assert [(i.workload.name, i.owner, i.since, i.average) for i in idle] == [
        ("lazy-notebook", "alice", T0 - timedelta(hours=2), 3.0)
    ]


def test_a_lead_sees_the_list_on_the_team_dashboard_and_a_member_does_not(client, alice, bob, submit):
    import time_machine

    now = T0 + timedelta(minutes=10)
    lazy = running(submit, alice, "lazy-notebook")
    sample(lazy, 3, T0 - timedelta(hours=2), now)
    with time_machine.travel(now, tick=False):
        client.force_login(bob)
        page = client.get("/teams/vision/").content.decode()
        listed = page[page.index("Idle now") :]
        row = listed[listed.index("lazy-notebook") :]
        assert "alice" in row[:400]
        assert "2 hours ago" in row[:600]
        client.force_login(alice)
        assert "Idle now" not in client.get("/teams/vision/").content.decode()
