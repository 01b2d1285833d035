"""A team's leads hear when its work comes to wait at the team's limit: once when it starts waiting there (and at
most once an hour), not every cycle it stays so; members and other teams' leads hear nothing."""

from __future__ import annotations

from django.utils import timezone

from portal.notify.models import Notification, Preference
from portal.queues.models import Quota
from portal.worker import apply, snapshot
from scheduler import decide


def cycle() -> None:
    snap, rows = snapshot.build(timezone.now())
    apply.apply(decide(snap), rows)


def test_the_leads_hear_once_when_work_comes_to_wait_at_the_team_limit(alice, bob, charlie, submit):
    Preference.objects.create(user=bob, email=True)  # vision's lead
    Preference.objects.create(user=alice, email=True)  # a member
    Quota.objects.filter(group__slug="vision").update(gpu_limit_milli=1000)
    for i in range(3):
        submit(alice, name=f"q{i}", gpus=1)
    cycle()
    (told,) = Notification.objects.filter(event="team_limit")
    assert (told.user, told.subject) == (bob, "Vision is at its limit")
    assert told.text.startswith("Work of Vision waits at the team's limit. Your team is at its limit on local")
    assert told.url.endswith("/teams/vision/")
    cycle()  # still waiting there: nothing new
    assert Notification.objects.filter(event="team_limit").count() == 1
