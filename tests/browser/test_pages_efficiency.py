"""The owner's efficiency page in headless Chromium: its charts drawn per GPU by the locally served plotly.js, the
idle GPU and the idle spell said in words, and nothing fetched from outside this site."""

from __future__ import annotations

from datetime import timedelta

from django.utils import timezone

from portal.usage import gpu_windows
from portal.usage.models import UsageGpuSample, UsageSample
from portal.workloads.models import Workload
from portal.workloads.states import State
from tests.browser.conftest import screenshot
from tests.browser.test_pages_dashboard import signed_in


def test_the_owner_sees_each_gpu_s_use_and_memory_and_the_idle_gpu(browser_page, gridlane, cast, submit):
    page = browser_page
    alice = cast["alice"]
    w = submit(alice, name="two-nodes-four-gpus", gpus=2)
    now = timezone.now().replace(second=0, microsecond=0)
    start = now - timedelta(hours=3)
    Workload.objects.filter(pk=w.pk).update(state=State.RUNNING, started_at=start, nodes=2)
    at = start
    while at < now:
        for node, use in (("n1", [90, 85]), ("n2", [88, 3])):  # GPU 1 of n2 sits idle
            UsageSample.objects.create(workload_id=w.pk, at=at, source=UsageSample.Source.JOB, gpus_milli=4000,
                                       node=node, gpu_utilisation=sum(use) / 2, gpus_read=2,
                                       gpus_idle=sum(1 for u in use if u < 80))  # fmt: skip
            UsageGpuSample.objects.bulk_create(
                UsageGpuSample(workload_id=w.pk, at=at, node=node, gpu=i, utilisation=u, memory_mib=4096 + 100 * u)
                for i, u in enumerate(use)
            )
        at += timedelta(minutes=10)
    gpu_windows.rebuild(w.pk)

    signed_in(page, gridlane, alice)
    page.set_viewport_size({"width": 1280, "height": 900})
    page.goto(f"{gridlane}/workloads/{w.pk}/efficiency/")
    for chart in ("gpu", "memory", "time"):
        page.wait_for_selector(f"#chart-{chart}[data-drawn] .main-svg")
    assert page.locator("#chart-gpu .scatterlayer .trace").count() == 4  # one line per GPU of both nodes
    assert page.evaluate("document.getElementById('chart-gpu').data.map(t => t.name)") == [
        "n1 GPU 0", "n1 GPU 1", "n2 GPU 0", "n2 GPU 1",
    ]  # fmt: skip
    row = page.locator("table.per-gpu tbody tr").nth(3)
    assert row.locator("td").nth(4).inner_text() == "idle"
    assert page.locator("dd.gpus-idle").inner_text() == "1 of 4 read"
    assert page.locator("dd.cpu").inner_text() == "unknown (not measured)"
    screenshot(page, "efficiency-two-nodes")
    assert page.gridlane_external == []
