"""A data scientist's day in Chromium: My workloads with session cards that stay live, Clone and Relaunch, a
form that shows the rules, refuses what could never run and puts focus on what to fix, all by keyboard; the
pages at a phone's width; the dead ends."""

from __future__ import annotations

import re
from datetime import timedelta
from decimal import Decimal

from django.utils import timezone

from portal.queues.models import Fabric
from portal.workloads import services
from portal.workloads.models import Workload
from portal.workloads.states import State
from tests.browser.conftest import screenshot
from tests.browser.test_pages_dashboard import signed_in


def _notebook(user, name, **fields):
    w, _ = services.submit(
        user,
        services.SubmitRequest(queue="notebooks", kind="notebook", name=name, gpus=Decimal("0.25"),
                               lease_hours=Decimal(8)),
    )  # fmt: skip
    Workload.objects.filter(pk=w.pk).update(**fields)
    return w


def test_my_workloads_shows_sessions_as_cards_and_stays_live(browser_page, gridlane, cast):
    page = browser_page
    alice = cast["alice"]
    now = timezone.now()
    _notebook(alice, "explore-embeddings", state=State.RUNNING, host="gpu-node-3", started_at=now,
              lease_ends_at=now + timedelta(hours=3), connect_url=f"{gridlane}/healthz",
              fabric=Fabric.objects.get(name="local"))  # fmt: skip
    _notebook(alice, "queued-notebook", pending_reason="Waiting for capacity on local")
    done, _ = services.submit(alice, services.SubmitRequest(queue="train", kind="training", name="resnet-base",
                                                            command="python train.py", gpus=Decimal(1)))  # fmt: skip
    Workload.objects.filter(pk=done.pk).update(state=State.SUCCEEDED, finished_at=now)
    signed_in(page, gridlane, alice)
    page.goto(f"{gridlane}/")
    card = page.locator(".session", has_text="explore-embeddings")
    card.wait_for()
    assert "gpu-node-3" in card.inner_text()
    assert re.search(r"2 h 59 min left|3 h left", card.inner_text())
    assert card.get_by_role("link", name="Connect to explore-embeddings").is_visible()
    assert card.get_by_label("Extend explore-embeddings by (hours)").is_visible()
    assert page.get_by_role("navigation", name="Main").get_by_role("link", name="New notebook").is_visible()
    screenshot(page, "my-workloads")

    # Work submitted elsewhere (the API, the CLI) appears without a reload, though every row had finished.
    services.submit(alice, services.SubmitRequest(queue="train", kind="training", name="from-the-cli",
                                                  command="true"))  # fmt: skip
    page.get_by_role("link", name="from-the-cli", exact=True).wait_for(timeout=15_000)

    # Extend a waiting notebook's lease from its card, by keyboard (a running one's goes to its fabric too:
    # tests/browser/test_pages_notebook.py extends a real one).
    waiting = page.locator(".session", has_text="queued-notebook")
    extend = waiting.get_by_label("Extend queued-notebook by (hours)")
    extend.fill("2")
    extend.press("Enter")
    waiting.get_by_text("Extended: the lease is now 10 hours, counted from when it starts.").wait_for()
    assert Workload.objects.get(name="queued-notebook").lease_s == 10 * 3600

    # Relaunch the finished run: a new workload, the same request.
    page.get_by_role("button", name="Relaunch resnet-base").click()
    page.wait_for_url(re.compile(r".*/workloads/[0-9a-f-]{36}/$"))
    again = Workload.objects.filter(name="resnet-base").exclude(pk=done.pk).get()
    assert (again.command, again.gpus_milli) == ("python train.py", 1000)

    # Clone: the form filled in from it, the queue still a choice.
    page.goto(f"{gridlane}/")
    page.get_by_role("link", name="Clone resnet-base").first.click()
    page.wait_for_url(re.compile(r".*/workloads/new/\?from="))
    assert page.get_by_label("Name").input_value() == "resnet-base"
    assert page.get_by_label("Command").input_value() == "python train.py"
    assert page.get_by_label("Queue", exact=True).is_enabled()


def test_the_form_shows_the_rules_and_puts_focus_on_what_to_fix(browser_page, gridlane, cast):
    page = browser_page
    signed_in(page, gridlane, cast["alice"])
    page.goto(f"{gridlane}/workloads/new/")
    guide = page.locator("#guide-train")
    assert "default 1 h, at most 1 d" in guide.inner_text()
    assert "room for 6 GPUs more" in guide.inner_text()
    screenshot(page, "new-training-run-guide")

    # Keyboard only: fill in, ask for more than the team may ever hold, submit with Enter.
    page.get_by_label("Name").fill("too-big")
    page.get_by_label("Command").fill("python train.py")
    page.get_by_label("GPUs per node").fill("7")
    page.get_by_label("GPUs per node").press("Enter")
    page.get_by_text("this asks for 7 GPUs, where the limit is 6").wait_for()
    focused = page.evaluate("document.activeElement && document.activeElement.name")
    assert focused == "gpus"  # the first invalid field, after htmx swapped the form in
    assert page.get_by_label("GPUs per node").get_attribute("aria-invalid") == "true"
    screenshot(page, "new-training-run-refused")
    assert not Workload.objects.exists()

    # Fix it and submit by keyboard again.
    page.get_by_label("GPUs per node").fill("1")
    page.get_by_label("GPUs per node").press("Enter")
    page.wait_for_url(re.compile(r".*/workloads/[0-9a-f-]{36}/$"))
    assert Workload.objects.get().name == "too-big"


def test_main_pages_work_at_a_phones_width(browser_page, gridlane, cast):
    page = browser_page
    alice = cast["alice"]
    _notebook(alice, "phone-notebook")
    services.submit(alice, services.SubmitRequest(queue="train", kind="training", name="phone-run",
                                                  command="true", gpus=Decimal("0.5")))  # fmt: skip
    page.set_viewport_size({"width": 390, "height": 844})
    signed_in(page, gridlane, alice)
    for path, name in (("/", "phone-my-workloads"), ("/workloads/new/", "phone-new-training-run"),
                       ("/notebooks/new/", "phone-new-notebook")):  # fmt: skip
        page.goto(f"{gridlane}{path}")
        page.wait_for_function("document.documentElement.scrollWidth <= window.innerWidth + 1", timeout=10_000)
        header = page.locator("header.top").bounding_box()
        assert header is not None
        assert header["height"] <= 844 / 8, header  # a compact header, not a fifth of the screen
        screenshot(page, name)
    page.goto(f"{gridlane}/")
    # Table cells say what they are at this width.
    cell = page.locator("#workload-rows td[data-label='GPUs']", has_text="0.5 GPU")
    label = cell.evaluate("td => getComputedStyle(td, '::before').content")
    assert label == '"GPUs"'
    # Each row is a compact card, not one long column: its figures side by side, two to a line.
    row = page.locator("#workload-rows tr", has_text="phone-run")
    kind, state = (row.locator(f"td[data-label='{label}']").bounding_box() for label in ("Kind", "State"))
    assert kind is not None
    assert state is not None
    assert abs(kind["y"] - state["y"]) < 2
    assert state["x"] > kind["x"] + kind["width"] - 1
    card = row.bounding_box()
    assert card is not None
    assert card["height"] < 844 / 3, card  # nine labelled lines were most of the screen
    screenshot(page, "phone-my-workloads-cards")


def test_dead_ends_lead_somewhere(browser_page, gridlane, cast):
    page = browser_page
    signed_in(page, gridlane, cast["alice"])
    response = page.goto(f"{gridlane}/admin/")
    assert response is not None
    assert response.status == 403
    assert page.get_by_role("heading", name="IT only").is_visible()
    assert page.locator("input[type=password]").count() == 0
    screenshot(page, "admin-it-only")
    response = page.goto(f"{gridlane}/no/such/page/")
    assert response is not None
    assert response.status == 404
    assert page.get_by_role("heading", name="Nothing here").is_visible()
    page.get_by_role("navigation", name="Main").get_by_role("link", name="My workloads").click()
    page.wait_for_url(f"{gridlane}/")
    screenshot(page, "not-found")
