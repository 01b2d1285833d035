"""The guides in headless Chromium: from a page, Help opens its part of the guides; the guides read on a laptop
and on a phone without sideways scrolling, and fetch nothing from outside this site."""

from __future__ import annotations

from tests.browser.conftest import screenshot
from tests.browser.test_pages_dashboard import signed_in

WIDER_THAN_THE_SCREEN = "document.documentElement.scrollWidth > window.innerWidth + 1"


def test_help_on_the_form_opens_its_section_and_the_guides_fit_the_screen(browser_page, gridlane, cast):
    page = browser_page
    signed_in(page, gridlane, cast["alice"])
    page.set_viewport_size({"width": 1280, "height": 800})
    page.goto(f"{gridlane}/workloads/new/")
    page.get_by_role("link", name="Help").click()
    page.wait_for_url(f"{gridlane}/docs/user-guide/#training-runs-and-batch-jobs")
    heading = page.locator("#training-runs-and-batch-jobs")
    assert heading.inner_text() == "Training runs and batch jobs"
    assert heading.evaluate("h => h.getBoundingClientRect().top < window.innerHeight")  # scrolled to it
    nav = page.get_by_role("navigation", name="Guides")
    assert nav.get_by_role("link", name="User guide").get_attribute("aria-current") == "page"
    screenshot(page, "docs-user-guide")

    for name in ("reference", "it-guide"):  # the widest tables and blocks
        nav.get_by_role("link", name="Reference" if name == "reference" else "IT guide").click()
        page.wait_for_url(f"{gridlane}/docs/{name}/")
        for width in (1280, 390):
            page.set_viewport_size({"width": width, "height": 800})
            assert not page.evaluate(WIDER_THAN_THE_SCREEN), (name, width)
    page.goto(f"{gridlane}/docs/")
    # The README's screenshot, served by the portal itself: wait until it has loaded (a busy machine may take a
    # while), then it must have pixels (a broken image completes with none).
    first_image = page.locator("article img").first
    page.wait_for_function("i => i.complete", arg=first_image.element_handle())
    assert first_image.evaluate("i => i.naturalWidth > 0")
    assert page.gridlane_external == []
