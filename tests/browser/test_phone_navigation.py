"""A phone's width (390 px): a Menu button opens every section of the main navigation, each in view (not a
line that scrolls sections off the screen), and the dashboard's chart titles fit their charts."""

from __future__ import annotations

from tests.browser.conftest import screenshot
from tests.browser.test_pages_dashboard import signed_in

WIDTH = 390


def test_the_menu_shows_every_section_and_chart_titles_fit(browser_page, gridlane, cast):
    page = browser_page
    page.set_viewport_size({"width": WIDTH, "height": 844})
    signed_in(page, gridlane, cast["it"])
    page.goto(f"{gridlane}/")
    nav = page.locator("nav#main-nav")
    sections = nav.locator("a")
    count = sections.count()
    assert count == 7  # My workloads, New notebook, New training run, Dashboards, Agents, Queues, Admin
    menu = page.get_by_role("button", name="Menu")
    assert menu.get_attribute("aria-expanded") == "false"
    assert not sections.first.is_visible()  # closed: the header stays compact
    menu.click()
    assert menu.get_attribute("aria-expanded") == "true"
    for index in range(count):
        link = sections.nth(index)
        assert link.is_visible()
        box = link.bounding_box()
        assert box is not None
        assert box["x"] >= 0, link.inner_text()
        assert box["x"] + box["width"] <= WIDTH, link.inner_text()
    screenshot(page, "phone-menu")
    sections.filter(has_text="Dashboards").click()
    page.wait_for_url(f"{gridlane}/teams/")

    page.goto(f"{gridlane}/teams/vision/")
    titles = page.locator(".plot .gtitle")
    titles.first.wait_for()
    assert titles.count() >= 1
    for index in range(titles.count()):
        title = titles.nth(index).bounding_box()
        assert title is not None
        assert title["x"] >= 0
        assert title["x"] + title["width"] <= WIDTH, titles.nth(index).text_content()
    screenshot(page, "phone-team-dashboard")
