"""Temporary grants on the pages: bob (vision's lead) asks from the dashboard, IT decides on its page, alice
(a member) sees the grants in force, and the use chart draws them as a band over the reservation and limit."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from portal.accounts.models import AuditEvent, ResourceGroup
from portal.queues.models import Fabric, QuotaGrant
from tests.dashboards.test_views import client_for, figure


def grant(state="approved", start=timedelta(hours=-1), hours=24, gpus=2.0, reason="a deadline"):
    now = timezone.now()
    return QuotaGrant.objects.create(
        team=ResourceGroup.objects.get(slug="vision"),
        fabric=Fabric.objects.get(name="local"),
        gpus_milli=int(gpus * 1000),
        starts_at=now + start,
        ends_at=now + start + timedelta(hours=hours),
        reason=reason,
        state=state,
    )


def ask(**changes):
    start = timezone.now() + timedelta(hours=1)
    return {"fabric": Fabric.objects.get(name="local").pk, "gpus": "1.5", "length": "3", "unit": "days",
            "starts_at": start.strftime("%Y-%m-%dT%H:%M"), "reason": "the CVPR deadline"} | changes  # fmt: skip


def test_a_lead_asks_from_the_dashboard_and_sees_the_ask_waiting(client, bob):
    c = client_for(client, bob)
    page = c.get("/teams/vision/").content.decode()
    assert "Ask for more GPUs" in page
    assert c.get("/teams/vision/grants/new/").status_code == 200
    response = c.post("/teams/vision/grants/new/", ask())
    assert response.status_code == 302
    assert response["Location"] == "/teams/vision/#grants"
    made = QuotaGrant.objects.get()
    assert (made.gpus_milli, made.state, made.requested_by) == (1500, "requested", bob)
    assert made.ends_at - made.starts_at == timedelta(days=3)
    assert AuditEvent.objects.filter(action="quotagrant.created", actor=bob).exists()
    page = c.get("/teams/vision/").content.decode()
    assert "the CVPR deadline" in page
    assert 'class="state state-requested"' in page


@pytest.mark.parametrize(
    ("what", "change", "words"),
    [
        ("no GPUs", {"gpus": "0"}, "greater than or equal to 0.001"),
        ("longer than 90 days", {"length": "91"}, "at most 90 days"),
        ("no reason", {"reason": ""}, "required"),
    ],
)
def test_an_ask_the_form_refuses_says_why_and_saves_nothing(client, bob, what, change, words):
    response = client_for(client, bob).post("/teams/vision/grants/new/", ask(**change))
    assert response.status_code == 400
    assert words in response.content.decode()
    assert not QuotaGrant.objects.exists()


def test_an_overlapping_ask_is_refused_with_what_to_do_instead(client, bob):
    grant(state="requested", start=timedelta(hours=2))
    response = client_for(client, bob).post("/teams/vision/grants/new/", ask())
    assert response.status_code == 400
    assert "extend or withdraw that one instead" in response.content.decode()
    assert QuotaGrant.objects.count() == 1


def test_it_approves_on_its_page_with_a_note_and_the_grant_raises_the_dashboard_s_numbers(client, it_admin, bob):
    waiting = grant(state="requested", start=timedelta(minutes=-5))
    c = client_for(client, it_admin)
    page = c.get("/it/grants/").content.decode()
    assert "a deadline" in page
    assert "Approve" in page
    response = c.post(f"/it/grants/{waiting.pk}/decide/", {"decision": "approve", "note": "go"})
    assert response.status_code == 302
    waiting.refresh_from_db()
    assert (waiting.state, waiting.decided_by, waiting.decision_note) == ("approved", it_admin, "go")
    assert AuditEvent.objects.get(action="quotagrant.approved").actor == it_admin
    # Deciding twice says so and changes nothing.
    c.post(f"/it/grants/{waiting.pk}/decide/", {"decision": "decline"})
    waiting.refresh_from_db()
    assert waiting.state == "approved"
    assert "approved already" in c.get("/it/grants/").content.decode()


def test_members_see_only_grants_in_force_or_to_come_and_leads_see_every_one(client, alice, bob):
    grant(reason="in force now")
    grant(state="requested", start=timedelta(days=2), reason="asked for")
    grant(state="declined", start=timedelta(days=5), reason="declined one")
    grant(start=timedelta(days=-3), hours=2, reason="over already")
    member = client_for(client, alice).get("/teams/vision/").content.decode()
    assert "in force now" in member
    assert "asked for" not in member
    assert "declined one" not in member
    assert "over already" not in member
    assert "Ask for more GPUs" not in member
    lead = client_for(client, bob).get("/teams/vision/").content.decode()
    for reason in ("in force now", "asked for", "declined one", "over already"):
        assert reason in lead
    assert 'class="state state-expired"' in lead


def test_a_lead_withdraws_an_ask(client, bob):
    waiting = grant(state="requested", start=timedelta(days=1))
    assert client_for(client, bob).post(f"/teams/vision/grants/{waiting.pk}/withdraw/").status_code == 302
    waiting.refresh_from_db()
    assert waiting.state == "withdrawn"
    assert AuditEvent.objects.get(action="quotagrant.withdrawn").actor == bob


def test_the_use_chart_draws_a_grant_as_a_band_over_the_reservation_and_the_limit(client, alice, cast):
    grant(gpus=2)
    page = client_for(client, alice).get("/teams/vision/?window=24h").content.decode()
    traces = {t["name"]: t for t in figure(page, "use")["data"]}
    band = traces["Reservation with temporary grants"]
    assert band["fill"] == "tonexty"
    assert band["y"][-1] == pytest.approx(6.0)  # 4 reserved, 2 granted
    assert band["y"][0] == traces["Reservation"]["y"][0]  # the grant started an hour ago: not there a day ago
    assert traces["Limit with temporary grants"]["y"][-1] == pytest.approx(8.0)
    assert traces["Reservation"]["y"][-1] == pytest.approx(4.0)  # the normal reservation, unchanged
    panel = page[page.index('id="now-panel"') : page.index("</dl>", page.index('id="now-panel"'))]
    assert "8 GPUs" in panel  # headroom: the limit of 6 and 2 granted, nothing in use


def test_without_grants_the_chart_has_no_band(client, alice, cast):
    grant(state="requested")
    page = client_for(client, alice).get("/teams/vision/").content.decode()
    assert [t["name"] for t in figure(page, "use")["data"]] == ["In use", "Reservation", "Limit"]


def test_the_dashboard_reads_its_grants_in_one_query_however_many(client, alice, django_assert_max_num_queries):
    c = client_for(client, alice)
    grant(start=timedelta(days=-20), reason="g")
    with django_assert_max_num_queries(13) as one:  # as tests/dashboards/test_views.py pins it (its budgets too)
        assert c.get("/teams/vision/?window=30d").status_code == 200
    for day in range(9):
        grant(start=timedelta(days=day * 2 - 18), hours=24, reason=f"g{day}")
    with django_assert_max_num_queries(len(one.captured_queries)):
        assert c.get("/teams/vision/?window=30d").status_code == 200


def test_the_now_tiles_and_the_forms_count_a_grant_in_force(client, alice, cast):
    grant(gpus=2)
    page = client_for(client, alice).get("/teams/vision/").content.decode()
    panel = page[page.index('id="now-panel"') : page.index("</dl>", page.index('id="now-panel"'))]
    assert '<dd class="reservation">6 GPUs <span class="hint">4 + 2 granted</span>' in panel
    assert '<dd class="limit">8 GPUs <span class="hint">6 + 2 granted</span>' in panel
    form = client_for(client, alice).get("/workloads/new/").content.decode()
    assert "Vision: 0 GPUs in use, limit 6 GPUs + 2 granted: room for 8 GPUs more" in form
