"""Launch a notebook from the browser on the local fabric and open it: the worker starts a real Jupyter
server, the workload page grows an Open notebook button by itself (htmx), and JupyterLab loads through the
portal's connect path (the portal under uvicorn, as production serves it): a cell runs on a kernel and a
terminal answers, both over WebSockets, and Jupyter's token shows up nowhere the browser can see."""

from __future__ import annotations

import re
from datetime import timedelta

from portal.worker import tasks
from portal.workloads import notebook_endpoint
from portal.workloads.models import Workload
from portal.workloads.states import State
from tests.browser.conftest import screenshot
from tests.browser.test_pages_dashboard import signed_in
from tests.conftest import wait_until


def test_launch_a_notebook_and_open_it(browser_page, gridlane, asgi_portal, cast, settings):
    settings.GRIDLANE_PUBLIC_URL = asgi_portal  # where its link leads: the portal that serves /connect/
    page = browser_page
    seen: list[str] = []  # every URL the browser asked for, and every header it was sent back
    page.on("request", lambda request: seen.append(request.url))
    page.on("response", lambda response: seen.append(str(response.headers)))
    signed_in(page, gridlane, cast["alice"])
    page.goto(f"{gridlane}/")
    page.get_by_role("navigation", name="Main").get_by_role("link", name="New notebook").click()
    page.wait_for_url(f"{gridlane}/notebooks/new/")
    page.get_by_label("Name").fill("explore-embeddings")
    page.get_by_label("GPUs").fill("0.25")
    page.get_by_label("Lease (hours)").fill("1")
    page.get_by_label("Lease (hours)").press("Enter")  # submit from the keyboard
    page.wait_for_url(re.compile(r".*/workloads/[0-9a-f-]{36}/$"))
    workload = Workload.objects.get(name="explore-embeddings")
    assert (workload.kind, workload.gpus_milli, workload.lease_s) == ("notebook", 250, 3600)

    # The test drives the worker; the page, polling by itself, shows the button once Jupyter answers.
    wait_until(lambda: (tasks.cycle(), page.locator("#open-notebook").count() == 1)[1], timeout=60, every=0.5)
    screenshot(page, "notebook-running")
    href = page.locator("#open-notebook").get_attribute("href")
    assert href is not None
    assert href == Workload.objects.get(pk=workload.pk).connect_url == f"{asgi_portal}/connect/{workload.pk}/lab"
    page.goto(f"{href}?reset")  # the same sign-in (the session cookie is the host's, whichever port); a fresh layout
    page.wait_for_selector("#jp-main-dock-panel", timeout=60_000)  # JupyterLab's main area
    assert "JupyterLab" in page.title()
    screenshot(page, "notebook-jupyterlab")
    server = notebook_endpoint.stored(Workload.objects.get(pk=workload.pk))
    assert server is not None
    token = server.token
    assert token not in page.content()

    # A cell on a kernel (its WebSocket goes through the portal too).
    page.locator('.jp-LauncherCard[data-category="Notebook"]').first.click()
    cell = page.locator(".jp-Notebook .jp-Cell .cm-content").first
    cell.wait_for(timeout=60_000)
    page.get_by_text("| Idle").first.wait_for(timeout=60_000)  # its kernel is up and connected (the status bar)
    cell.click()
    page.keyboard.type("print(6 * 7)")
    page.keyboard.press("Shift+Enter")
    page.locator(".jp-OutputArea-output", has_text="42").first.wait_for(timeout=60_000)
    screenshot(page, "notebook-cell")

    # A terminal (another WebSocket).
    page.goto(f"{href}?reset")
    page.locator('.jp-LauncherCard[data-category="Other"][title*="erminal"]').first.click()
    page.locator(".jp-Terminal .xterm-screen").first.wait_for(timeout=60_000)
    page.locator(".jp-Terminal .xterm-screen").first.click()
    page.keyboard.type("echo answer-$((6 * 7)) > answer.txt")
    page.keyboard.press("Enter")
    screenshot(page, "notebook-terminal")

    def answered() -> bool:  # what the shell wrote, read back through the portal with the browser's own session
        got = page.request.get(f"{asgi_portal}/connect/{workload.pk}/api/contents/answer.txt?content=1")
        return got.ok and got.json()["content"] == "answer-42\n"

    wait_until(answered, timeout=60, every=0.5)
    assert not [line for line in seen if token in line]  # no URL asked for, no header sent back

    # Extend the lease from the page, with the keyboard: the new end is recorded and said at once.
    page.goto(f"{gridlane}{workload.get_absolute_url()}")
    ends = Workload.objects.get(pk=workload.pk).lease_ends_at
    assert ends is not None
    page.get_by_label("Extend the lease by (hours)").fill("2")
    page.get_by_label("Extend the lease by (hours)").press("Enter")
    page.get_by_text("Extended: the lease now ends at").wait_for()
    assert Workload.objects.get(pk=workload.pk).lease_ends_at == ends + timedelta(hours=2)
    page.get_by_text(f"it ends at {ends + timedelta(hours=2):%Y-%m-%d %H:%M} UTC").wait_for()  # the page refreshed
    screenshot(page, "notebook-extended")

    page.once("dialog", lambda dialog: dialog.accept())
    page.get_by_role("button", name="Cancel").click()
    wait_until(lambda: (tasks.cycle(), Workload.objects.get(pk=workload.pk).state == State.CANCELLED)[1], timeout=30)
