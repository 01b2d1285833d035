"""Fair-share standing: the terms are the ones the scheduler's cycle works with, and leads see who goes first."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from portal.accounts.models import ResourceGroup
from portal.policy import standing
from portal.queues.models import Queue
from portal.usage.models import UsageMemberRollup
from portal.usage.rollup import hour_of
from portal.worker import snapshot
from portal.worker.models import GroupUsage
from portal.workloads.models import Workload
from scheduler.priority import ordered


@pytest.fixture
def waiting(site, submit):
    """vision has used 12 GPUs on average lately (far over its share) and fraud nothing; both have work waiting,
    submitted apart."""
    now = timezone.now()
    vision = ResourceGroup.objects.get(slug="vision")
    half_life_s = 24 * 3600
    GroupUsage.objects.create(group=vision, decayed_gpu_seconds=12 * half_life_s / 0.6931471805599453, updated_at=now)
    made = []
    for minutes, user, gpus, tier in ((90, "alice", 2, "normal"), (60, "charlie", 1, "normal"),
                                      (30, "bob", 1, "high"), (10, "charlie", 4, "low")):  # fmt: skip
        w = submit(site[user], gpus=gpus, priority=tier)
        Workload.objects.filter(pk=w.pk).update(submitted_at=now - timedelta(minutes=minutes))
        made.append(w.pk)
    UsageMemberRollup.objects.create(group=vision, user=site["alice"], hour=hour_of(now) - timedelta(hours=1),
                                     gpu_hours=2.0)  # fmt: skip
    return {**site, "now": now, "made": made}


def test_the_terms_are_the_ones_the_cycle_orders_by(waiting):
    now = waiting["now"]
    snap, _ = snapshot.build(now)
    by_team = {slug: standing.standing(ResourceGroup.objects.get(slug=slug), now) for slug in ("vision", "fraud")}
    for found in by_team.values():
        for team in found.teams:
            pk = ResourceGroup.objects.get(slug=team.slug).pk
            if pk in snap.shares:
                assert team.allocation_gpus == snap.shares[pk]
            assert team.usage_gpus == snap.usage.get(pk, 0.0)
    assert by_team["vision"].team.usage_gpus == pytest.approx(12.0)
    everyone = sorted(
        ((t.priority, str(i)) for found in by_team.values() for (i, _), t in found.own), key=lambda p: -p[0]
    )
    assert [job_id for _, job_id in everyone] == [j.id for j in ordered(snap)]
    assert len(everyone) == 4


def test_a_lead_sees_who_goes_first_and_why(waiting, api_as):
    answer = api_as(waiting["bob"]).get("/api/v1/groups/vision/standing/")
    assert answer.status_code == 200
    body = answer.json()
    assert body["team"]["team"] == "vision"
    assert [a["team"] for a in body["ahead"]] == ["fraud"]
    assert body["ahead"][0]["reasons"][0]["term"] == "share"  # vision used its share; fraud did not
    assert body["members"][0]["member"] == "alice"
    assert {p["name"] for p in body["pending"]} == {"job"}
    assert len(body["pending"]) == 2  # vision's own two; fraud's work is shown as terms only
    assert all("id" not in t["best_pending"] for t in body["teams"] if t["best_pending"])


def test_who_may_read_a_teams_standing(waiting, api_as, client):
    assert api_as(waiting["charlie"]).get("/api/v1/groups/vision/standing/").status_code == 404
    assert api_as(waiting["alice"]).get("/api/v1/groups/vision/standing/").status_code == 200
    client.force_login(waiting["alice"])
    with CaptureQueriesContext(connection) as queries:
        page = client.get("/standing/vision/")
    assert page.status_code == 200
    assert "Who goes before your team" in page.content.decode()
    assert len(queries) <= 20
    client.force_login(waiting["charlie"])
    assert client.get("/standing/vision/").status_code == 404


def test_a_team_with_nothing_waiting_has_nobody_ahead(site):
    found = standing.standing(ResourceGroup.objects.get(slug="fraud"), timezone.now())
    assert found.ahead == []
    assert found.own == []
    assert Queue.objects.exists()
