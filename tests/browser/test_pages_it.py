"""IT's editors in Chromium: a queue with kinds as checkboxes and teams by name, the warning for a queue no
fabric serves; a quota in GPUs, CPUs and GB; a profile in the same units, then offered on the form."""

from __future__ import annotations

import re

from portal.queues.models import Profile, Queue, Quota
from tests.browser.conftest import screenshot
from tests.browser.test_pages_dashboard import signed_in


def test_it_makes_a_queue_a_quota_and_a_profile_in_the_units_people_use(browser_page, gridlane, cast):
    page = browser_page
    signed_in(page, gridlane, cast["it"])

    page.goto(f"{gridlane}/admin/queues/queue/add/")
    page.get_by_label("Name:", exact=True).press_sequentially("Interactive")
    assert page.get_by_label("Slug:").input_value() == "interactive"  # made from the name as it is typed
    page.get_by_label("Notebook", exact=True).check()
    page.get_by_label("VM lease", exact=True).check()
    page.locator("#id_allowed_groups_from").select_option(label="Vision")
    page.locator("#id_allowed_groups_add").click()
    screenshot(page, "queue-editor")
    page.get_by_role("button", name="Save", exact=True).click()
    page.get_by_text("Interactive: no fabric: work sent here cannot run.").wait_for()
    queue = Queue.objects.get(slug="interactive")
    assert queue.kinds == ["notebook", "vm"]
    assert [g.slug for g in queue.allowed_groups.all()] == ["vision"]

    quota = Quota.objects.get(group__slug="vision", fabric__name="local")
    page.goto(f"{gridlane}/admin/queues/quota/{quota.pk}/change/")
    assert page.get_by_label("GPU limit:").input_value() == "6"
    page.get_by_label("GPU reservation:").fill("2.5")
    page.get_by_label("Memory limit (GB):").fill("96")
    screenshot(page, "quota-editor")
    page.get_by_role("button", name="Save", exact=True).click()
    page.wait_for_url(re.compile(r".*/admin/queues/quota/$"))
    quota.refresh_from_db()
    assert (quota.gpu_reservation_milli, quota.memory_limit_mib) == (2500, 96 * 1024)

    page.goto(f"{gridlane}/admin/queues/profile/add/")
    page.get_by_label("Name:").fill("Quarter GPU")
    page.get_by_label("Notebook", exact=True).check()
    page.get_by_label("GPUs:").fill("0.25")
    page.get_by_label("CPUs:").fill("2")
    page.get_by_label("Memory (GB):").fill("8")
    page.get_by_label("Hours:").fill("4")
    page.get_by_role("button", name="Save", exact=True).click()
    page.wait_for_url(re.compile(r".*/admin/queues/profile/$"))
    page.get_by_text("0.25 GPU, 2 CPUs, 8 GB, 4 hours").wait_for()
    screenshot(page, "profile-list")
    profile = Profile.objects.get(name="Quarter GPU")
    assert (profile.gpus_milli, profile.cpus_milli, profile.memory_mib, profile.kinds) == (
        250,
        2000,
        8192,
        ["notebook"],
    )
