"""The address bar follows a submit: a submit that went through shows the new workload's address; a Relaunch
that is refused now shows the clone form's address (a reload or a bookmark opens that form again), never the
relaunch URL that only takes a POST."""

from __future__ import annotations

import re
from decimal import Decimal

from django.utils import timezone

from portal.accounts.models import ResourceGroup
from portal.queues.models import Queue
from portal.workloads import services
from portal.workloads.models import Workload
from portal.workloads.states import State
from tests.browser.test_pages_dashboard import signed_in

WORKLOAD_PAGE = re.compile(r".*/workloads/[0-9a-f-]{36}/$")


def test_the_address_bar_shows_where_a_submit_led(browser_page, gridlane, cast):
    page = browser_page
    alice = cast["alice"]
    done, _ = services.submit(alice, services.SubmitRequest(queue="train", kind="training", name="resnet-base",
                                                            command="python train.py", gpus=Decimal(1)))  # fmt: skip
    Workload.objects.filter(pk=done.pk).update(state=State.SUCCEEDED, finished_at=timezone.now())
    train = Queue.objects.get(slug="train")
    train.allowed_groups.remove(ResourceGroup.objects.get(slug="vision"))  # Relaunch is refused now
    signed_in(page, gridlane, alice)
    page.goto(f"{gridlane}{done.get_absolute_url()}")
    page.get_by_role("button", name="Relaunch resnet-base").click()
    page.get_by_role("heading", name="Relaunch resnet-base").wait_for()
    assert page.locator(".invalid").count() >= 1  # the reason is on the form
    page.wait_for_url(f"{gridlane}{done.clone_url()}")  # set once the page's scripts have run (DOMContentLoaded)
    assert Workload.objects.count() == 1

    # Allowed again: the form, sent by htmx, leads to the new workload, and the address bar says so.
    train.allowed_groups.add(ResourceGroup.objects.get(slug="vision"))
    page.reload()
    assert page.get_by_label("Name").input_value() == "resnet-base"
    page.get_by_role("button", name="Submit").click()
    page.wait_for_url(WORKLOAD_PAGE)
    again = Workload.objects.exclude(pk=done.pk).get()
    assert page.url == f"{gridlane}{again.get_absolute_url()}"
    page.go_back()
    page.wait_for_url(f"{gridlane}{done.clone_url()}")
