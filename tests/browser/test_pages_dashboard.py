"""A lead's team dashboard in headless Chromium: every chart is drawn by the locally served plotly.js, the
time filters swap the dashboard in place, and nothing is fetched from outside this site."""

from __future__ import annotations

from datetime import timedelta

from django.test import Client
from django.utils import timezone

from portal.accounts.models import ResourceGroup
from portal.queues.models import Queue
from portal.usage.models import UsageMemberRollup, UsageRollup
from portal.usage.rollup import hour_of
from tests.browser.conftest import screenshot

CHARTS = ["use", "pending", "wait", "idle", "members", "queues"]


def signed_in(page, gridlane, user):
    """Sign in by session cookie: these tests are about the pages, the sign-in has its own tests."""
    client = Client()
    client.force_login(user)
    page.context.add_cookies([{"name": "sessionid", "value": client.cookies["sessionid"].value, "url": gridlane}])


def test_a_leads_dashboard_draws_its_charts_and_filters_in_place(browser_page, gridlane, cast):
    page = browser_page
    vision = ResourceGroup.objects.get(slug="vision")
    train = Queue.objects.get(slug="train")
    now = hour_of(timezone.now())
    for back in range(48):
        UsageRollup.objects.create(
            group=vision, queue=train, hour=now - timedelta(hours=back), gpu_hours=2 + back % 5,
            idle_gpu_hours=back % 2, reserved_gpu_hours=4.0, pending_gpu_hours=back % 3, started=1,
            wait_p50_s=60.0 * (back % 7), wait_p95_s=600.0 + 60 * (back % 11),
        )  # fmt: skip
    for user, hours in ((cast["alice"], 30.0), (cast["bob"], 12.0)):
        UsageMemberRollup.objects.create(group=vision, user=user, hour=now, gpu_hours=hours)

    signed_in(page, gridlane, cast["bob"])
    page.set_viewport_size({"width": 1280, "height": 900})
    page.goto(f"{gridlane}/teams/vision/")
    for chart in CHARTS:
        page.wait_for_selector(f"#chart-{chart}[data-drawn] .main-svg")
    assert page.locator("#chart-use .scatterlayer .trace").count() == 3  # use, reservation, limit
    screenshot(page, "dashboard-vision-lead")

    page.get_by_role("link", name="24 hours").click()
    page.wait_for_url(f"{gridlane}/teams/vision/?window=24h")
    page.wait_for_selector('#dashboard a[aria-current="page"]:has-text("24 hours")')
    page.wait_for_selector("#chart-use[data-drawn] .main-svg")
    assert page.evaluate("document.getElementById('chart-use').data[0].x.length") == 24

    page.set_viewport_size({"width": 390, "height": 844})  # a phone
    # Nothing wider than the phone once plotly has followed the resize (no sideways scrolling).
    page.wait_for_function("document.documentElement.scrollWidth <= window.innerWidth + 1", timeout=10_000)
    screenshot(page, "dashboard-vision-phone")
    assert page.gridlane_external == []


def test_it_sees_capacity_planning_drawn_per_flavor(browser_page, gridlane, cast):
    page = browser_page
    vision = ResourceGroup.objects.get(slug="vision")
    train = Queue.objects.get(slug="train")
    now = hour_of(timezone.now())
    for back in range(24):
        UsageRollup.objects.create(
            group=vision, queue=train, hour=now - timedelta(hours=back), gpu_hours=4 + back % 4,
            pending_gpu_hours=back % 6,
        )  # fmt: skip
    signed_in(page, gridlane, cast["it"])
    page.set_viewport_size({"width": 1280, "height": 900})
    page.goto(f"{gridlane}/it/capacity/?window=24h")
    page.wait_for_selector("#chart-flavor-1[data-drawn] .main-svg")
    assert "buy or burst" in page.inner_text("#capacity")
    page.get_by_role("link", name="Queues").first.click()
    page.wait_for_url(f"{gridlane}/it/queues/")
    assert "Training and batch" in page.inner_text("#queue-rows")
    assert page.gridlane_external == []
