"""IT's what-if in Chromium over a generated month of history: the form, a progress bar that htmx polls while
the replay runs, then the table per team and the charts drawn by the locally served plotly.js."""

from __future__ import annotations

import random
import uuid
from datetime import timedelta

from django.utils import timezone

from portal.accounts.models import ResourceGroup
from portal.queues.models import Queue
from portal.whatif import tasks
from portal.whatif.models import WhatIfRun
from portal.workloads.models import Workload
from portal.workloads.states import State
from tests.browser.conftest import screenshot
from tests.browser.test_pages_dashboard import signed_in
from tests.conftest import wait_until


def a_month_of_history(cast, n: int = 600) -> None:
    """n finished workloads of vision and fraud over the last 30 days, waits and runtimes drawn at random."""
    rnd = random.Random(30)
    now = timezone.now()
    teams = {slug: ResourceGroup.objects.get(slug=slug) for slug in ("vision", "fraud")}
    train = Queue.objects.get(slug="train")
    rows = []
    for i in range(n):
        owner = rnd.choice([cast["alice"], cast["bob"], cast["charlie"]])
        submitted = now - timedelta(days=30) + timedelta(seconds=rnd.uniform(0, 29 * 86400))
        started = submitted + timedelta(seconds=rnd.expovariate(1 / 600))
        runtime = rnd.choice([600, 1800, 3600, 4 * 3600])
        rows.append(Workload(
            id=uuid.uuid4(), owner=owner, group=teams["fraud" if owner.username == "charlie" else "vision"],
            queue=train, kind="training", name=f"history-{i}", runtime_limit_s=runtime * 2,
            gpus_milli=rnd.choice([1000, 1000, 2000, 4000]), state=State.SUCCEEDED, submitted_at=submitted,
            admitted_at=started, started_at=started, finished_at=started + timedelta(seconds=runtime),
        ))  # fmt: skip
    Workload.objects.bulk_create(rows)


def test_it_replays_a_month_with_more_gpus_and_compares(browser_page, gridlane, cast):
    page = browser_page
    a_month_of_history(cast)
    signed_in(page, gridlane, cast["it"])
    page.goto(f"{gridlane}/it/what-if/")
    page.get_by_text("Priority tiers are not modelled in the replay yet.").wait_for()

    # A bad number first: said on the page, nothing queued.
    page.get_by_label("A fabric's GPUs").check()
    page.get_by_label("Fabric", exact=True).select_option("local")
    page.get_by_label("GPUs on the fabric").fill("-2")
    page.get_by_role("button", name="Replay").click()
    page.get_by_text("A number of GPUs, 0 or more.").wait_for()
    assert not WhatIfRun.objects.exists()

    page.get_by_label("GPUs on the fabric").fill("16")
    page.get_by_role("button", name="Replay").click()
    page.wait_for_selector("progress#whatif-progress")
    run = wait_until(lambda: WhatIfRun.objects.first())
    screenshot(page, "whatif-queued")
    tasks.replay(run.pk)  # what the django-q2 cluster does
    # htmx polls the run every second and swaps the results in once it is done.
    page.wait_for_selector("table.whatif", timeout=15_000)
    for chart in ("p95", "in-use", "pending"):
        page.wait_for_selector(f"#chart-{chart}[data-drawn] .main-svg")
    assert page.locator("#chart-p95 .barlayer .trace").count() == 3  # actual, current policy, proposed
    assert page.locator("table.whatif tbody tr").count() == 3  # fraud, vision, all teams
    assert page.get_by_role("heading", name="What if: local with 16 GPUs").is_visible()
    screenshot(page, "whatif-done")
    assert page.gridlane_external == []
