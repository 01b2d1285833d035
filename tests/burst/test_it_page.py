"""IT's burst page: instances by state with age, cost and what they run; spend against budget by day; the
autoscaler's decisions with reasons. Absent for everyone else, bounded in queries."""

from __future__ import annotations

import re
import uuid
from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from portal.accounts.models import ResourceGroup
from portal.burst.models import BurstPool, Cooldown, Decision, Instance
from portal.queues.models import Fabric


@pytest.fixture
def pool(cast) -> BurstPool:
    fabric = Fabric.objects.create(name="aws-burst", kind="agent")
    return BurstPool.objects.create(
        fabric=fabric, credentials="env:AWS_BURST", region="eu-west-1", zones=["eu-west-1a"], image="ami-1",
        server_url="https://gridlane.example", agent_group=ResourceGroup.objects.get(slug="vision"),
        budget_per_hour=Decimal("20"), budget_per_month=Decimal("3000"),
    )  # fmt: skip


def instance(pool, state: str, hours: float, price: str = "5.672", gone: bool = False) -> Instance:
    now = timezone.now()
    return Instance.objects.create(
        pool=pool, launch_id=uuid.uuid4(), instance_type="g5.12xlarge", zone="eu-west-1a", state=state,
        provider_id=f"i-{uuid.uuid4().hex[:17]}", price_per_hour=Decimal(price), gpus=4, cpus=48, memory_gib=192,
        requested_at=now - timedelta(hours=hours), launched_at=now - timedelta(hours=hours),
        gone_at=now if gone else None, host_name=f"aws-burst-{uuid.uuid4().hex[:8]}",
    )  # fmt: skip


def test_the_burst_page_shows_instances_spend_and_decisions(client, it_admin, pool, django_assert_max_num_queries):
    busy = instance(pool, "busy", hours=2)
    instance(pool, "gone", hours=3, gone=True)
    Decision.objects.create(pool=pool, action="launch", instance=busy, message="launched g5.12xlarge for 3 waiting "
                            "workloads of team vision: 4 GPUs pending for 12 min")  # fmt: skip
    Decision.objects.create(pool=pool, action="hold", message="1 waiting workloads of team vision wait: the pool is "
                            "at its maximum of 4 instances")  # fmt: skip
    client.force_login(it_admin)
    with django_assert_max_num_queries(10):
        page = client.get("/it/burst/").content.decode()
    assert "Cloud burst" in page
    assert busy.provider_id in page
    assert "120 min" in page  # its age
    assert re.search(r"<td>11\.3\d <span class=\"hint\">at 5\.672/h", page)  # two hours (and a few seconds) at 5.672/h
    assert "launched g5.12xlarge for 3 waiting workloads of team vision: 4 GPUs pending for 12 min" in page
    assert "at its maximum of 4 instances" in page
    assert "Now 5.67/h of a budget of 20.00/h" in page
    assert "Spend by day" in page


def test_the_burst_page_is_absent_for_everyone_but_it(client, alice, pool):
    client.force_login(alice)
    assert client.get("/it/burst/").status_code == 404


def test_the_it_navigation_links_the_burst_page(client, it_admin):
    client.force_login(it_admin)
    assert 'href="/it/burst/"' in client.get("/it/queues/").content.decode()


def test_the_burst_page_shows_what_the_autoscaler_keeps_off_and_until_when(client, it_admin, pool):
    now = timezone.localtime()
    until = now + timedelta(minutes=7)
    Cooldown.objects.create(pool=pool, instance_type="g5.12xlarge", zone="eu-west-1a", why="capacity",
                            code="InsufficientInstanceCapacity", until=until)  # fmt: skip
    Cooldown.objects.create(pool=pool, instance_type="g9.huge", why="invalid", code="InvalidInstanceType",
                            until=now + timedelta(hours=1))  # fmt: skip
    Cooldown.objects.create(pool=pool, instance_type="g5.xlarge", zone="eu-west-1a", why="capacity",
                            until=now - timedelta(minutes=1))  # over: not shown  # fmt: skip
    client.force_login(it_admin)
    page = client.get("/it/burst/").content.decode()
    assert re.search(
        rf"g5\.12xlarge in eu-west-1a: no capacity <span class=\"hint\">\(InsufficientInstanceCapacity\)</span>, "
        rf"retry after <time [^>]*>{until:%H:%M}</time>",
        page,
    )
    assert "g9.huge in every zone: unknown to the provider" in page
    assert "g5.xlarge in" not in page
