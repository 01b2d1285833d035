"""IT's profiles on the training form in Chromium: the first one chosen, the numbers it stands for hidden until
"Custom", its runtime shown and fixed; submitted by keyboard with the profile's own numbers."""

from __future__ import annotations

import re
from decimal import Decimal

from portal.queues.models import Profile
from portal.workloads.models import Workload
from tests.browser.conftest import screenshot
from tests.browser.test_pages_dashboard import signed_in


def test_a_profile_is_the_first_choice_and_custom_shows_the_numbers(browser_page, gridlane, cast):
    page = browser_page
    Profile.objects.create(name="Small GPU", kinds=["training"], gpus_milli=1000, cpus_milli=8000,
                           memory_mib=64 * 1024, hours=Decimal(8), description="most fine-tuning")  # fmt: skip
    Profile.objects.create(name="Big node", kinds=["training"], gpus_milli=4000, cpus_milli=16000,
                           memory_mib=64 * 1024, order=2)  # fmt: skip
    signed_in(page, gridlane, cast["alice"])
    page.goto(f"{gridlane}/workloads/new/")
    small = page.get_by_label("Small GPU (1 GPU, 8 CPUs, 64 GB, 8 hours) \u2014 most fine-tuning")
    assert small.is_checked()
    assert not page.get_by_label("GPUs per node").is_visible()  # the profile stands for the numbers
    runtime = page.get_by_label("Runtime limit (minutes)")
    assert runtime.input_value() == "480"
    assert runtime.get_attribute("readonly") is not None
    screenshot(page, "form-with-profiles")

    page.get_by_label("Custom: the numbers below").check()
    assert page.get_by_label("GPUs per node").is_visible()
    assert runtime.get_attribute("readonly") is None

    # Back to a profile without hours: the runtime is the person's to give.
    page.get_by_label("Big node (4 GPUs, 16 CPUs, 64 GB)").check()
    assert not page.get_by_label("GPUs per node").is_visible()
    runtime.fill("90")
    page.get_by_label("Name").fill("with-a-profile")
    page.get_by_label("Command").fill("python train.py")
    page.get_by_label("Name").press("Enter")
    page.wait_for_url(re.compile(r".*/workloads/[0-9a-f-]{36}/$"))
    w = Workload.objects.get(name="with-a-profile")
    assert (w.gpus_milli, w.cpus_milli, w.runtime_limit_s) == (4000, 16000, 90 * 60)
