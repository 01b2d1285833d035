"""What a newcomer's first day stumbled on, in Chromium: buttons that must be visible, pages that must fit."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal

from django.test import Client
from django.utils import timezone

from portal.queues.models import Fabric
from portal.workloads import services
from portal.workloads.models import Workload
from portal.workloads.states import State
from tests.browser.conftest import screenshot
from tests.browser.test_pages_dashboard import signed_in

# The WCAG contrast ratio between an element's text and the background it is drawn on (the first ancestor
# with an opaque background).
CONTRAST = """(el) => {
  const rgb = (s) => s.match(/[\\d.]+/g).map(Number);
  const lum = ([r, g, b]) => {
    const f = (c) => { c /= 255; return c <= 0.03928 ? c / 12.92 : Math.pow((c + 0.055) / 1.055, 2.4); };
    return 0.2126 * f(r) + 0.7152 * f(g) + 0.0722 * f(b);
  };
  let node = el, bg = null;
  while (node) {
    const c = rgb(getComputedStyle(node).backgroundColor);
    if (c.length < 4 || c[3] > 0.5) { bg = c; break; }
    node = node.parentElement;
  }
  bg = bg || [255, 255, 255];
  const a = lum(rgb(getComputedStyle(el).color)), b = lum(bg);
  return (Math.max(a, b) + 0.05) / (Math.min(a, b) + 0.05);
}"""


def test_share_and_stop_sharing_are_visible_on_the_workload_page(browser_page, gridlane, cast):
    page = browser_page
    alice = cast["alice"]
    now = timezone.now()
    w, _ = services.submit(
        alice,
        services.SubmitRequest(queue="notebooks", kind="notebook", name="shared-nb", gpus=Decimal("0.25"),
                               lease_hours=Decimal(8)),
    )  # fmt: skip
    Workload.objects.filter(pk=w.pk).update(
        state=State.RUNNING, started_at=now, lease_ends_at=now + timedelta(hours=3),
        fabric=Fabric.objects.get(name="local"),
    )  # fmt: skip
    signed_in(page, gridlane, alice)
    page.goto(f"{gridlane}/workloads/{w.pk}/")
    share = page.get_by_role("button", name="Share with Vision")
    assert share.is_visible()
    assert share.evaluate(CONTRAST) >= 4.5
    screenshot(page, "share-button")
    share.click()
    stop = page.get_by_role("button", name="Stop sharing")
    stop.wait_for()
    assert stop.evaluate(CONTRAST) >= 4.5
    # The top bar's Sign out stays white on its dark background.
    assert page.get_by_role("button", name="Sign out").evaluate(CONTRAST) >= 4.5


def test_a_server_error_on_an_htmx_form_says_so_with_the_request_id(browser_page, gridlane, cast, monkeypatch):
    from portal.workloads import views

    def broken(*args, **kwargs):
        raise RuntimeError("a bug")

    monkeypatch.setattr(views, "_submit", broken)  # the live server runs in this process
    page = browser_page
    signed_in(page, gridlane, cast["alice"])
    page.goto(f"{gridlane}/workloads/new/")
    page.get_by_label("Name").fill("resnet")
    page.get_by_label("Command").fill("python train.py")
    with page.expect_response(lambda r: r.request.method == "POST") as answered:
        page.get_by_role("button", name="Submit").click()
    request_id = answered.value.headers["x-request-id"]
    alert = page.locator("#submit-form .request-error")
    alert.wait_for()
    assert alert.get_attribute("role") == "alert"
    assert "Something went wrong on Gridlane's side (error 500)" in alert.inner_text()
    assert request_id in alert.inner_text()
    screenshot(page, "htmx-server-error")


def test_a_404_under_connect_has_the_portals_look(browser_page, asgi_portal, cast):
    page = browser_page
    client = Client()
    client.force_login(cast["alice"])
    page.context.add_cookies([{"name": "sessionid", "value": client.cookies["sessionid"].value, "url": asgi_portal}])
    response = page.goto(f"{asgi_portal}/connect/00000000-0000-0000-0000-000000000000/lab")
    assert response.status == 404
    assert page.get_by_role("heading", name="Not found").is_visible()
    card = page.locator(".error-page")
    assert card.evaluate("(el) => getComputedStyle(el).backgroundColor") == "rgb(255, 255, 255)"
    assert page.locator("header.top").evaluate("(el) => getComputedStyle(el).backgroundColor") != "rgba(0, 0, 0, 0)"
    screenshot(page, "connect-404")


PAGES_AT_1280 = [
    ("alice", "/"),
    ("alice", "/workloads/new/"),
    ("alice", "/workloads/new/script/"),
    ("alice", "/notebooks/new/"),
    ("alice", "/leases/new/"),
    ("alice", "/accounts/"),
    ("bob", "/teams/vision/"),
    ("bob", "/teams/vision/chargeback/"),
    ("bob", "/teams/vision/chargeback/?month=2026-11"),
    ("bob", "/?scope=team"),
    ("bob", "/teams/vision/grants/new/"),
    ("bob", "/accounts/agents/"),
    ("it", "/it/queues/"),
    ("it", "/it/fabrics/"),
    ("it", "/it/capacity/"),
    ("it", "/it/burst/"),
    ("it", "/it/grants/"),
    ("it", "/it/what-if/"),
]


def test_every_page_fits_a_1280_pixel_screen(browser_page, gridlane, cast, submit):
    page = browser_page
    page.set_viewport_size({"width": 1280, "height": 800})
    from tests.api.test_group_usage import seed_month

    seed_month(cast, submit)  # a month of usage and cost on two more fabrics and queues
    w = submit(cast["alice"], name="a-long-enough-name-for-a-training-run-of-the-vision-team", gpus=1)
    reason = "Waiting for capacity on local: 8 of 8 GPUs are held by work of vision, fraud and the-research-group"
    Workload.objects.filter(pk=w.pk).update(pending_reason=reason, command="python " + "x" * 300)
    wider = []
    for who, path in [*PAGES_AT_1280, ("alice", f"/workloads/{w.pk}/")]:
        signed_in(page, gridlane, cast[who])
        page.goto(f"{gridlane}{path}")
        width = page.evaluate("() => document.documentElement.scrollWidth")
        if width > 1280:
            wider.append((path, width))
            screenshot(page, "too-wide" + path.replace("/", "-"))
    assert wider == []


def test_my_workloads_cancels_ticked_rows_and_filters_in_chromium(browser_page, gridlane, cast, submit):
    page = browser_page
    alice = cast["alice"]
    first = submit(alice, name="first-run")
    submit(alice, name="second-run")
    submit(alice, name="kept-run")
    reason = "Waiting for capacity on local: " + "every GPU is held by work of other teams " * 4
    Workload.objects.filter(pk=first.pk).update(pending_reason=reason)
    signed_in(page, gridlane, alice)
    page.goto(f"{gridlane}/?show=active")
    page.get_by_label("Select first-run").check()
    page.get_by_label("Select second-run").check()
    screenshot(page, "my-workloads-select")
    page.get_by_role("button", name="Cancel selected").click()
    page.get_by_text("Cancelled 2 workloads.").wait_for()
    assert page.url.endswith("/?scope=mine&show=active")
    assert page.get_by_role("link", name="kept-run", exact=True).is_visible()
    assert not page.get_by_role("link", name="first-run", exact=True).is_visible()  # cancelled: no longer active
    assert set(Workload.objects.filter(state="cancelled").values_list("name", flat=True)) == {"first-run", "second-run"}
    page.get_by_role("button", name="Cancel kept-run").click()
    page.get_by_text("Cancelled 1 workload.").wait_for()
    assert Workload.objects.get(name="kept-run").state == "cancelled"


def test_times_show_in_the_viewers_time_zone_with_utc_on_hover(browser_page, gridlane, cast, submit):
    w = submit(cast["alice"], name="zoned")
    at = datetime(2026, 12, 6, 3, 5, tzinfo=UTC)
    Workload.objects.filter(pk=w.pk).update(estimated_start=at)
    w.events.update(at=at)
    context = browser_page.context.browser.new_context(timezone_id="Asia/Tokyo", locale="en-GB")
    try:
        page = context.new_page()
        signed_in(page, gridlane, cast["alice"])
        page.goto(f"{gridlane}/workloads/{w.pk}/")
        event = page.locator("#events time.local, ol time.local").first
        event.wait_for()
        assert event.get_attribute("title") == "2026-12-06 03:05 UTC"
        page.wait_for_function("() => document.querySelector('time.local').dataset.shown === '1'")
        assert "12:05" in event.inner_text()  # Tokyo is UTC+9
        assert "UTC" not in event.inner_text()
    finally:
        context.close()
