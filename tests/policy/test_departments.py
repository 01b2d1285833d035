"""A department's dashboard: its teams side by side, figures that add up to the department's, few queries."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from rest_framework.test import APIClient

from portal.accounts.models import Membership, ResourceGroup
from portal.queues.models import Queue
from portal.usage.models import UsageRollup, UsageTeamRollup
from portal.usage.rollup import hour_of
from portal.workloads.models import Workload

FIGURES = ("allocated_gpu_hours", "used_gpu_hours", "idle_gpu_hours", "unknown_gpu_hours", "cpu_hours",
           "memory_gb_hours", "cost", "idle_cost", "reserved_gpu_hours", "unused_reservation_gpu_hours",
           "pending_gpu_hours")  # fmt: skip


@pytest.fixture
def used(site, submit):
    """Three hours of rollups for each team, and work that holds GPUs now: vision 8 (reserves 7 over both
    fabrics), fraud 1 (reserves 3.5)."""
    train = Queue.objects.get(slug="train")
    now = hour_of(timezone.now())
    for slug, held, reserved in (("vision", 4.0, 3.0), ("fraud", 0.5, 1.5)):
        team = ResourceGroup.objects.get(slug=slug)
        for h in range(1, 4):
            hour = now - timedelta(hours=h)
            UsageRollup.objects.create(group=team, queue=train, hour=hour, gpu_hours=held, used_gpu_hours=held / 2,
                                       idle_gpu_hours=held / 4, cpu_hours=8, memory_gb_hours=32, cost=held * 2.5,
                                       idle_cost=held / 4 * 2.5, pending_gpu_hours=1.25)  # fmt: skip
            UsageTeamRollup.objects.create(group=team, hour=hour, reserved_gpu_hours=reserved, gpu_hours=held,
                                           unused_reservation_gpu_hours=max(0.0, reserved - held))  # fmt: skip
    for user, gpus, n in ((site["alice"], 2, 4), (site["charlie"], 1, 1)):
        for _ in range(n):
            Workload.objects.filter(pk=submit(user, gpus=gpus).pk).update(state="running")
    return site


def test_the_departments_figures_are_the_sums_of_its_teams(used, api_as):
    client = api_as(used["it"])
    department = client.get("/api/v1/departments/research/usage/", {"days": 2})
    assert department.status_code == 200, department.json()
    body = department.json()
    teams = {t["team"]: t for t in body["teams"]}
    assert set(teams) == {"fraud", "vision"}
    for name in FIGURES:
        own = [client.get(f"/api/v1/groups/{slug}/usage/", {"days": 2}).json()["totals"][name] for slug in teams]
        assert [teams[slug][name] for slug in teams] == own, name
        assert body["totals"][name] == pytest.approx(sum(own), abs=1e-6), name
    assert (teams["vision"]["in_use_milli"], teams["fraud"]["in_use_milli"]) == (8000, 1000)
    assert (teams["vision"]["borrowing_milli"], teams["fraud"]["leaving_milli"]) == (1000, 2500)
    assert body["now"] == {"in_use_milli": 9000, "borrowed_within_milli": 1000, "borrowed_beyond_milli": 1000}
    assert teams["vision"]["borrowed_gpu_hours"] == 3.0  # one GPU beyond its reservation, three hours
    assert teams["fraud"]["borrowed_gpu_hours"] == 0.0
    assert body["gpu_reservation_milli"] == 8000


def test_the_page_and_the_api_take_a_bounded_number_of_queries(used, api_as, client):
    client.force_login(used["it"])
    api = api_as(used["it"])
    for url, reader in (("/departments/research/", client), ("/api/v1/departments/research/usage/", api)):
        with CaptureQueriesContext(connection) as queries:
            answer = reader.get(url)
        assert answer.status_code == 200
        assert len(queries) <= 10, [q["sql"][:120] for q in queries.captured_queries]
    page = client.get("/departments/research/").content.decode()
    assert "Vision" in page
    assert "Fraud detection" in page


def test_who_may_see_a_department(used, api_as, agent):
    Membership.objects.create(user=used["bob"], group=used["department"], role=Membership.Role.LEAD)
    url = "/api/v1/departments/research/usage/"
    codes = {
        "it": api_as(used["it"]).get(url).status_code,
        "its head": api_as(used["bob"]).get(url).status_code,
        "a member of one of its teams": api_as(used["alice"]).get(url).status_code,
        "another": api_as(used["charlie"]).get(url).status_code,
        "agent": api_as(agent.user).get(url).status_code,
        "anonymous": APIClient().get(url).status_code,
        "a team that is no department": api_as(used["it"]).get("/api/v1/departments/vision/usage/").status_code,
    }
    assert codes == {"it": 200, "its head": 200, "a member of one of its teams": 404, "another": 404, "agent": 404,
                     "anonymous": 401, "a team that is no department": 404}  # fmt: skip
    assert api_as(used["it"]).get(url, {"by": "member"}).json()["errors"] == {
        "by": ["Unknown parameter; give from, to, days."]
    }
