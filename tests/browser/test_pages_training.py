"""Submit a training run from the browser and cancel it, watching its state change without a reload."""

from __future__ import annotations

import re

from portal.worker import tasks
from portal.workloads.models import Workload
from portal.workloads.states import State
from tests.browser.conftest import screenshot
from tests.browser.test_pages_dashboard import signed_in
from tests.conftest import wait_until


def test_submit_a_training_run_and_cancel_it(browser_page, gridlane, cast):
    page = browser_page
    signed_in(page, gridlane, cast["alice"])
    page.goto(f"{gridlane}/workloads/new/")
    page.get_by_label("Name").fill("resnet-sweep")
    page.get_by_label("Command").fill("echo started; sleep 300")
    page.get_by_label("GPUs per node").fill("1")
    page.get_by_role("button", name="Submit").click()
    page.wait_for_url(re.compile(r".*/workloads/[0-9a-f-]{36}/$"))
    workload = Workload.objects.get(name="resnet-sweep")

    wait_until(lambda: (tasks.cycle(), page.locator(".summary .state-running").count() == 1)[1], timeout=30)
    page.once("dialog", lambda dialog: dialog.accept())
    page.get_by_role("button", name="Cancel").click()
    wait_until(lambda: (tasks.cycle(), page.locator(".summary .state-cancelled").count() == 1)[1], timeout=30)
    assert Workload.objects.get(pk=workload.pk).state == State.CANCELLED
    assert page.locator("#workload-status .events").inner_text().count("cancel") >= 1
    screenshot(page, "training-cancelled")

    page.goto(f"{gridlane}/")  # the list, with its New notebook and New training run buttons, on a phone
    page.set_viewport_size({"width": 390, "height": 844})
    page.wait_for_function("document.documentElement.scrollWidth <= window.innerWidth + 1", timeout=10_000)
