"""The team dashboard through the test client: who may see it, what it reads, how many queries it takes."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.utils import timezone

from portal.accounts.models import ResourceGroup
from portal.queues.models import Queue
from portal.usage.models import UsageMemberRollup, UsageRollup
from portal.usage.rollup import hour_of

HTMX = {"HTTP_HX_REQUEST": "true"}


def client_for(client, user):
    client.force_login(user)
    return client


def figure(page: str, name: str) -> dict:
    start = page.index(f'id="figure-{name}"')
    body = page[page.index(">", start) + 1 : page.index("</script>", start)]
    return json.loads(body)


@pytest.fixture
def vision_hours(cast):
    """Three hours of vision's rollups on queue train, the last one with starts that waited."""
    vision = ResourceGroup.objects.get(slug="vision")
    train = Queue.objects.get(slug="train")
    now = hour_of(timezone.now())
    for back, (used, idle, unknown) in enumerate([(4.0, 1.0, 0.0), (6.0, 0.0, 2.5), (2.0, 2.0, 0.0)]):
        UsageRollup.objects.create(
            group=vision, queue=train, hour=now - timedelta(hours=back), gpu_hours=used, idle_gpu_hours=idle,
            unknown_gpu_hours=unknown,
            reserved_gpu_hours=4.0, pending_gpu_hours=1.5, started=2 if back == 0 else 0,
            wait_p50_s=120.0 if back == 0 else None, wait_p95_s=4000.0 if back == 0 else None,
        )  # fmt: skip
    UsageMemberRollup.objects.create(group=vision, user=cast["alice"], hour=now, gpu_hours=9.0)
    UsageMemberRollup.objects.create(group=vision, user=cast["bob"], hour=now, gpu_hours=3.0)
    return vision


def test_a_member_sees_her_teams_dashboard_drawn_from_the_rollups(client, alice, vision_hours):
    page = client_for(client, alice).get("/teams/vision/").content.decode()
    assert "<h1>Vision" in page or "Vision" in page
    assert "vendor/plotly.min.js" in page  # served locally, no CDN
    use = figure(page, "use")
    # Past hours from the rollups; the current hour is what is held now (nothing), not the hour's average.
    assert sum(use["data"][0]["y"]) == pytest.approx(8.0)
    assert use["data"][0]["y"][-1] == 0
    # The limit from the quota's own history: drawn from when the quota was made (in the cast), not before.
    assert use["data"][2]["y"][-1] == pytest.approx(6.0)
    assert use["data"][2]["y"][0] is None
    members = figure(page, "members")["data"][0]
    assert dict(zip(members["y"], members["x"], strict=True)) == {"bob": 3.0, "alice": 9.0}
    wait = figure(page, "wait")
    assert wait["data"][0]["y"] == [pytest.approx(4000 / 60, rel=1e-3)]
    assert wait["layout"]["shapes"][0]["y0"] == pytest.approx(vision_hours.wait_slo_seconds / 60)
    idle = figure(page, "idle")["data"]
    assert sum(idle[1]["y"]) == pytest.approx(3.0)
    assert sum(idle[2]["y"]) == pytest.approx(2.5)  # no utilisation data: hatched, apart from busy
    assert sum(idle[0]["y"]) == pytest.approx(12.0 - 3.0 - 2.5)
    assert '<dd class="unknown">2.5</dd>' in page
    assert '<dd class="idle-share">32 %</dd>' in page  # 3 idle of the 9.5 GPU-hours whose use is known
    assert sum(figure(page, "pending")["data"][0]["y"]) == pytest.approx(3.0)  # and nothing waits now


def test_a_lead_and_it_see_it_too(client, bob, it_admin, vision_hours):
    assert client_for(client, bob).get("/teams/vision/").status_code == 200
    assert client_for(client, it_admin).get("/teams/vision/").status_code == 200


def test_another_teams_dashboard_is_absent(client, charlie, vision_hours):
    assert client_for(client, charlie).get("/teams/vision/").status_code == 404
    assert client.get("/teams/fraud/").status_code == 200


def test_the_index_sends_a_one_team_member_straight_to_her_dashboard(client, alice, it_admin):
    response = client_for(client, alice).get("/teams/")
    assert response.status_code == 302
    assert response["Location"] == "/teams/vision/"
    page = client_for(client, it_admin).get("/teams/").content.decode()
    assert "/teams/vision/" in page
    assert "/teams/fraud/" in page


def test_the_dashboard_needs_a_sign_in(client, cast):
    assert client.get("/teams/vision/").status_code == 302


def test_the_window_filter_picks_the_hours(client, alice, vision_hours):
    c = client_for(client, alice)
    day = figure(c.get("/teams/vision/?window=24h").content.decode(), "use")
    month = figure(c.get("/teams/vision/?window=30d").content.decode(), "use")
    assert len(day["data"][0]["x"]) == 24
    assert len(month["data"][0]["x"]) == 30 * 24
    assert len(figure(c.get("/teams/vision/?window=bogus").content.decode(), "use")["data"][0]["x"]) == 7 * 24


def test_htmx_gets_only_the_partial(client, alice, vision_hours):
    page = client_for(client, alice).get("/teams/vision/?window=24h", **HTMX).content.decode()
    assert page.lstrip().startswith('<div id="dashboard">')
    assert "<html" not in page
    assert 'aria-current="page"' in page


def test_running_and_waiting_work_is_listed_with_its_reason(client, alice, submit, cast):
    from portal.workloads.models import Workload

    w = submit(alice, name="waits-for-room", gpus=1)
    Workload.objects.filter(pk=w.pk).update(pending_reason="The team is at its limit of 6 GPUs.")
    submit(cast["charlie"], name="fraud-job", gpus=1)
    page = client_for(client, alice).get("/teams/vision/").content.decode()
    assert "waits-for-room" in page
    assert "The team is at its limit of 6 GPUs." in page
    assert "fraud-job" not in page
    assert "0 running, 1 waiting" in page


def test_the_dashboard_takes_a_bounded_number_of_queries(
    client, alice, submit, vision_hours, settings, django_assert_max_num_queries
):
    settings.DEMO = False  # a site's budget; the demo's notice of simulated readings is one query more
    c = client_for(client, alice)
    for i in range(20):
        submit(alice, name=f"w{i}", gpus=0.5)
    # The session and the user, then ten: the team (and whether the reader leads it), its quotas and grants, the
    # two rollups, its work and what it holds, the quota history, the scheduler's accounting and its budgets.
    with django_assert_max_num_queries(12):
        assert c.get("/teams/vision/?window=30d").status_code == 200


def _served_plotly(client, alice) -> bytes:
    response = client_for(client, alice).get("/static/vendor/plotly.min.js")
    assert response.status_code == 200
    return b"".join(response.streaming_content) if response.streaming else response.content


def test_plotly_is_served_from_this_site_as_its_basic_bundle(client, alice):
    """`make` installs plotly.js's basic bundle (scatter and bar: all the dashboards draw), a quarter of the full
    one's parse time; the browser tests draw every chart with it."""
    body = _served_plotly(client, alice)
    assert b"plotly.js (basic - minified)" in body[:300]
    assert len(body) < 2_000_000


def test_a_site_may_ask_for_plotlys_full_bundle(client, alice, settings):
    settings.GRIDLANE_PLOTLY_BUNDLE = "full"
    body = _served_plotly(client, alice)
    assert b"plotly.js v" in body[:300]
    assert len(body) > 4_000_000


def test_the_now_panel_reads_live_and_the_current_hour_agrees_with_it(client, alice, bob, submit, vision_hours):
    """3.25 GPUs in use and 7 waiting are said as such, not as the current hour's average so far."""
    from portal.queues.models import Fabric
    from portal.workloads.models import Workload
    from portal.workloads.states import State

    local = Fabric.objects.get(name="local")
    for name, gpus in (("a", 2), ("b", 1), ("c", 0.25)):
        w = submit(alice, name=name, gpus=gpus)
        Workload.objects.filter(pk=w.pk).update(state=State.RUNNING, fabric=local)
    waiting = [submit(bob, name=f"w{i}", gpus=1) for i in range(7)]
    Workload.objects.filter(pk=waiting[0].pk).update(submitted_at=timezone.now() - timedelta(minutes=5))
    page = client_for(client, alice).get("/teams/vision/").content.decode()
    panel = page[page.index('id="now-panel"') : page.index("</dl>", page.index('id="now-panel"'))]
    assert "3.25 GPUs" in panel  # in use
    assert "7 GPUs" in panel  # waiting
    assert "4 GPUs" in panel  # the reservation
    assert "6 GPUs" in panel  # the limit
    assert "2.75 GPUs" in panel  # headroom
    # CPUs and memory beside the GPUs, in use and asked for.
    from django.db.models import F, Sum

    from portal import words

    def held(*states):
        found = Workload.objects.filter(group__slug="vision", state__in=states).aggregate(
            c=Sum(F("cpus_milli") * F("nodes")), m=Sum(F("memory_mib") * F("nodes"))
        )
        return f"{words.cpus(found['c'] / 1000)}, {words.number(found['m'] / 1024, 0)} GB"

    assert f'<span class="hint cpus-memory">{held(State.RUNNING)}</span>' in panel
    assert f'<span class="hint cpus-memory">{held(State.PENDING)}</span>' in panel
    use = figure(page, "use")
    assert use["data"][0]["y"][-1] == pytest.approx(3.25)
    assert use["data"][1]["y"][-1] == pytest.approx(4.0)
    assert figure(page, "pending")["data"][0]["y"][-1] == pytest.approx(7.0)
    # Work still waiting counts: the current hour's p95 wait is at least the 5 minutes one has waited.
    wait = figure(page, "wait")
    p95 = next(t for t in wait["data"] if t["name"] == "Training and batch p95")
    assert p95["y"][-1] >= 5.0


def test_a_limit_raised_last_week_is_drawn_as_it_was(client, alice, cast):
    """The limit line follows the quota's history (the audit log), hour by hour."""
    import time_machine

    from portal.queues.models import Quota

    quota = Quota.objects.get(group__slug="vision", fabric__name="local")
    with time_machine.travel(timezone.now() - timedelta(days=3)):
        from portal.accounts.models import AuditEvent

        AuditEvent.objects.filter(action="quota.created", target__startswith="Vision on").update(
            at=timezone.now() - timedelta(days=1)
        )
        quota.gpu_limit_milli = 7000
        quota.save()
    quota.gpu_limit_milli = 6000
    quota.save()
    use = figure(client_for(client, alice).get("/teams/vision/?window=7d").content.decode(), "use")
    limits = use["data"][2]["y"]
    assert limits[0] is None  # six days ago: no quota yet
    assert 7.0 in limits
    assert limits[-1] == pytest.approx(6.0)


def test_the_slo_is_said_in_minutes_or_hours(client, alice, vision_hours):
    page = client_for(client, alice).get("/teams/vision/").content.decode()
    assert "3600 s" not in page
    assert "Wait SLO (p95)</dt><dd>1 h" in page


def test_a_team_whose_gpus_report_no_utilisation_has_an_unknown_idle_share_not_zero(client, charlie):
    fraud = ResourceGroup.objects.get(slug="fraud")
    queue = Queue.objects.get(slug="train")
    UsageRollup.objects.create(
        group=fraud,
        queue=queue,
        hour=hour_of(timezone.now()) - timedelta(hours=1),
        gpu_hours=2.0,
        unknown_gpu_hours=2.0,
    )
    page = client_for(client, charlie).get("/teams/fraud/").content.decode()
    assert '<dd class="idle-share">unknown</dd>' in page
    assert '<dd class="unknown">2</dd>' in page


def test_the_demo_notice_of_simulated_readings_costs_one_query_and_a_site_none(
    client, alice, vision_hours, settings, django_assert_num_queries, django_assert_max_num_queries
):
    c = client_for(client, alice)
    c.get("/teams/vision/?window=30d")  # warm: what the first request of a process reads once
    settings.DEMO = False
    with django_assert_max_num_queries(12) as site:  # (its budgets among them: one query)
        assert "simulated-gpus" not in c.get("/teams/vision/?window=30d").content.decode()
    settings.DEMO = True
    with django_assert_num_queries(len(site.captured_queries) + 1):
        c.get("/teams/vision/?window=30d")
