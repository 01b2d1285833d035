"""IT's pages: queues, fabrics and capacity planning; absent for everyone else, bounded in queries."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.utils import timezone

from portal.accounts.models import ResourceGroup
from portal.dashboards import it
from portal.queues.models import Fabric, Queue
from portal.usage.models import UsageRollup
from portal.usage.rollup import hour_of
from portal.workloads.models import Workload
from portal.workloads.states import State

PAGES = ["/it/queues/", "/it/fabrics/", "/it/capacity/"]


def test_the_fabrics_page_shows_declared_and_observed_capacity(client, it_admin, django_assert_max_num_queries):
    Fabric.objects.filter(name="local").update(
        observed_gpus_milli=3000, observed_cpus_milli=12000, observed_memory_mib=32 * 1024,
        observed_at=timezone.now() - timedelta(seconds=5), observed_detail="3 of 8 GPUs up",
    )  # fmt: skip
    (row,) = it.fabric_rows()
    assert (row.gpus, row.observed_gpus, row.observed_cpus, row.observed_memory_gb, row.fresh) == (8, 3, 12, 32, True)
    client.force_login(it_admin)
    with django_assert_max_num_queries(8):
        page = client.get("/it/fabrics/").content.decode()
    assert "GPUs declared" in page
    assert "GPUs observed" in page
    assert '<td>8 <span class="hint">16 CPUs, 64 GB</span></td>' in page  # CPUs and memory beside GPUs
    assert re.search(r'<td>3\s*<span class="hint">12 CPUs, 32 GB;', page)
    assert "3 of 8 GPUs up" in page
    assert "stale" not in page

    Fabric.objects.filter(name="local").update(observed_at=timezone.now() - timedelta(hours=1))
    assert "stale: planning with the declared capacity" in client.get("/it/fabrics/").content.decode()
    Fabric.objects.filter(name="local").update(observed_at=None)
    assert "not yet" in client.get("/it/fabrics/").content.decode()


@pytest.mark.parametrize("url", PAGES)
def test_it_pages_are_absent_for_people_outside_it(client, alice, bob, url):
    for user in (alice, bob):
        client.force_login(user)
        assert client.get(url).status_code == 404


def test_the_queues_overview_shows_backlog_running_and_fabric_health(client, it_admin, alice, submit,
                                                                     django_assert_max_num_queries):  # fmt: skip
    submit(alice, name="a", gpus=1)
    running = submit(alice, name="b", gpus=1)
    Workload.objects.filter(pk=running.pk).update(state=State.RUNNING)
    Fabric.objects.filter(name="local").update(healthy=False, health_detail="root is not writable")
    client.force_login(it_admin)
    with django_assert_max_num_queries(10):
        page = client.get("/it/queues/").content.decode()
    assert "Training and batch" in page
    train = Queue.objects.get(slug="train")
    assert f'<a href="/admin/queues/queue/{train.pk}/change/"' in page  # each row opens its editor
    assert 'href="/admin/queues/queue/add/">New queue</a>' in page
    (row,) = [r for r in it.queue_rows() if r.figures.queue.slug == "train"]
    assert (row.figures.backlog, row.figures.running, row.healthy) == (1, 1, False)
    assert "unhealthy" in page


def test_the_fabrics_page_shows_capacity_and_gpus_held(client, it_admin, alice, submit):
    w = submit(alice, name="a", gpus=2)
    Workload.objects.filter(pk=w.pk).update(state=State.RUNNING, fabric=Fabric.objects.get(name="local"))
    (row,) = it.fabric_rows()
    assert (row.gpus, row.gpus_in_use, row.use_percent) == (8.0, 2.0, 25.0)
    assert (row.cpus_in_use, row.memory_gb_in_use) == (1.0, 4.0)
    client.force_login(it_admin)
    page = client.get("/it/fabrics/", HTTP_HX_REQUEST="true").content.decode()
    assert "local" in page
    assert '25 %</meter> 2 GPUs <span class="hint">1 CPU, 4 GB</span></td>' in page  # with units


def test_one_gpu_is_said_in_the_singular():
    from portal.queues.models import QuotaGrant

    grant = QuotaGrant(team=ResourceGroup(name="Vision"), fabric=Fabric(name="local"), gpus_milli=1000,
                       starts_at=timezone.now())  # fmt: skip
    assert ": +1 GPU from " in str(grant)


def test_capacity_planning_says_buy_or_burst_when_demand_passes_capacity(client, it_admin, cast,
                                                                         django_assert_max_num_queries):  # fmt: skip
    vision = ResourceGroup.objects.get(slug="vision")
    train = Queue.objects.get(slug="train")
    now = hour_of(timezone.now())
    for back in range(10):  # 6 GPUs used and 5 waiting on an 8-GPU fabric: 3 short, for 10 hours
        UsageRollup.objects.create(group=vision, queue=train, hour=now - timedelta(hours=back), gpu_hours=6,
                                   pending_gpu_hours=5, cpu_hours=12 - back, memory_gb_hours=40)  # fmt: skip
    (plan,) = it.capacity_plan("24h", timezone.now())
    assert (plan.flavor, plan.capacity, plan.short_hours, plan.hours) == ("demo", 8.0, 10, 24)
    # CPUs and memory beside the GPUs: the flavor's own, and the most held in an hour of the window.
    assert (plan.cpus, plan.memory_gb, plan.most_cpus_held, plan.most_memory_gb_held) == (16, 64, 12, 40)
    assert plan.signal
    used, waiting, capacity = plan.figure["data"]
    assert capacity["y"] == [8.0] * 24
    assert sum(used["y"]) == 60
    assert sum(waiting["y"]) == 50
    client.force_login(it_admin)
    with django_assert_max_num_queries(10):
        page = client.get("/it/capacity/?window=24h").content.decode()
    assert "buy or burst" in page
    assert 'id="figure-flavor-1"' in page
    assert 'demo: 8 GPUs <span class="hint">16 CPUs, 64 GB</span>' in page
    assert "at most 12 CPUs of 16 CPUs and 40 of 64 GB held in an hour" in page


def _burst_pool(flavor: str):
    from decimal import Decimal

    from portal.burst.models import BurstPool

    fabric = Fabric.objects.create(name="cloud", kind="agent", gpu_flavor=flavor, gpus_milli=64_000)
    return BurstPool.objects.create(
        fabric=fabric, provider="ec2", credentials="env:NONE", region="eu-west-1", image="ami-0a1b2c3d4e5f60718",
        server_url="https://gridlane.example", agent_group=ResourceGroup.objects.create(slug="platform", name="P"),
        budget_per_hour=Decimal(20), budget_per_month=Decimal(5000),
    )  # fmt: skip


@pytest.mark.parametrize(("gpu_month", "says"), [("500", "burst: "), ("100", "buy: 3 GPUs at 300.00 a month")])
def test_capacity_planning_answers_buy_or_burst_with_numbers(client, it_admin, cast, settings, gpu_month, says,
                                                              django_assert_max_num_queries):  # fmt: skip
    from decimal import Decimal

    from portal.burst.models import Instance

    settings.GRIDLANE_GPU_MONTH_PRICE = Decimal(gpu_month)
    vision, train = ResourceGroup.objects.get(slug="vision"), Queue.objects.get(slug="train")
    now = hour_of(timezone.now())
    for back in range(10):  # 3 GPUs short for 10 hours on the 8-GPU demo flavor
        UsageRollup.objects.create(group=vision, queue=train, hour=now - timedelta(hours=back), gpu_hours=6,
                                   pending_gpu_hours=5)  # fmt: skip
    pool = _burst_pool("demo")
    at = timezone.now()  # one instance of one GPU at 1.006 an hour, for two hours of the window
    Instance.objects.create(
        pool=pool, instance_type="g5.xlarge", gpus=1, price_per_hour=Decimal("1.006"), state="gone",
        launched_at=at - timedelta(hours=5), gone_at=at - timedelta(hours=3),
    )  # fmt: skip
    (plan,) = it.capacity_plan("24h", timezone.now())
    assert plan.capacity == 8.0  # the burst pool's declared size is not the site's own capacity
    c = plan.choice
    assert (c.short_gpu_hours, c.gpus_to_buy) == (30.0, 3)
    assert (c.burst_spend, c.burst_rate) == (Decimal("2.0120"), Decimal("1.006"))
    assert c.burst_gpu_hours == pytest.approx(2.0)
    per_month = Decimal("1.006") * 30 * Decimal(30) / Decimal(str(c.window_days))
    assert c.burst_per_month == per_month.quantize(Decimal("0.01"))
    assert c.buy_per_month == Decimal(gpu_month) * 3
    assert c.verdict.startswith(says)
    client.force_login(it_admin)
    with django_assert_max_num_queries(11):
        page = client.get("/it/capacity/?window=24h").content.decode()
    assert "30 GPU-hours; 3 GPUs more would have covered 95 % of the hours" in page
    assert "2 GPU-hours for 2.01 (1.006 a GPU-hour)" in page
    assert says in page


def test_without_a_gpu_price_the_page_gives_the_numbers_and_no_verdict(cast, settings):
    settings.GRIDLANE_GPU_MONTH_PRICE = None
    (plan,) = it.capacity_plan("24h", timezone.now())
    assert plan.choice.short_gpu_hours == 0
    assert plan.choice.verdict == "nothing to buy or burst for: demand stayed within capacity"
    assert plan.choice.burst_rate is None
    assert plan.choice.burst_per_month is None


def test_the_fabrics_page_warns_when_reservations_and_grants_in_force_exceed_a_fabric(client, it_admin):
    from portal.accounts.models import ResourceGroup
    from portal.queues.models import Quota, QuotaGrant

    client.force_login(it_admin)
    assert "over-reserved" not in client.get("/it/fabrics/").content.decode()  # the demo: 4 + 2 of 8 GPUs
    local = Fabric.objects.get(name="local")
    vision = ResourceGroup.objects.get(slug="vision")
    research = ResourceGroup.objects.create(slug="research", name="Research")  # a department holding vision's 4
    ResourceGroup.objects.filter(pk=vision.pk).update(parent=research)
    Quota.objects.create(group=research, fabric=local, gpu_reservation_milli=5000)
    assert [r.reserved_gpus for r in it.fabric_rows()] == [7]  # research's 5 (vision's 4 within), fraud's 2
    now = timezone.now()
    QuotaGrant.objects.create(team=vision, fabric=local, gpus_milli=3000, starts_at=now - timedelta(hours=1),
                              ends_at=now + timedelta(hours=1), reason="deadline", state="approved")  # fmt: skip
    page = client.get("/it/fabrics/").content.decode()
    assert "Reservations here come to 9 GPUs with the grants in force, more than its 8 GPUs" in page


def test_its_queue_p95_and_the_team_dashboard_count_a_wait_alike_while_the_work_still_waits(client, it_admin, alice,
                                                                                          submit):  # fmt: skip
    from portal.workloads import stats

    waiting = submit(alice, name="waits", gpus=1)
    Workload.objects.filter(pk=waiting.pk).update(submitted_at=timezone.now() - timedelta(minutes=10))
    (row,) = [r for r in it.queue_rows() if r.figures.queue.slug == "train"]
    assert row.figures.p95_wait_seconds is not None
    assert row.figures.p95_wait_seconds >= 600  # not "no starts" while work has waited 10 minutes
    client.force_login(it_admin)
    assert "10 min" in client.get("/it/queues/").content.decode()
    from tests.dashboards.test_views import client_for, figure

    wait = figure(client_for(client, alice).get("/teams/vision/").content.decode(), "wait")
    p95 = next(t for t in wait["data"] if t["name"] == "Training and batch p95")
    assert p95["y"][-1] == pytest.approx(row.figures.p95_wait_seconds / 60, abs=0.1)  # the same wait, in minutes
    assert stats.waited(waiting.submitted_at, None, waiting.submitted_at + timedelta(minutes=3)) == 180
