"""A site with a department, a tier, a grant and a burst pool beside the demo cast."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal
from typing import Any

import pytest
from django.utils import timezone


@pytest.fixture
def site(cast: dict[str, Any]) -> dict[str, Any]:
    from portal.accounts.models import ResourceGroup
    from portal.burst.models import BurstPool, InstanceType
    from portal.queues.models import Fabric, PriorityTier, Profile, Queue, QueueTarget, Quota, QuotaGrant

    research = ResourceGroup.objects.create(slug="research", name="Research")
    ResourceGroup.objects.filter(slug__in=["vision", "fraud"]).update(parent=research)
    h100 = Fabric.objects.create(name="h100", kind="local", gpu_flavor="h100", gpus_milli=16000, cpus_milli=64000,
                                 memory_mib=512 * 1024, gpu_hour_price=Decimal("2.5"))  # fmt: skip
    Quota.objects.create(group=research, fabric=h100, gpu_reservation_milli=8000, gpu_limit_milli=12000)
    for slug, reserve in (("vision", 3000), ("fraud", 1500)):
        Quota.objects.create(group=ResourceGroup.objects.get(slug=slug), fabric=h100, gpu_reservation_milli=reserve,
                             gpu_limit_milli=8000)  # fmt: skip
    QueueTarget.objects.create(queue=Queue.objects.get(slug="train"), fabric=h100, order=1)
    tier = PriorityTier.objects.create(slug="urgent", name="Urgent", weight=3, leads_only=True, order=40)
    tier.allowed_groups.add(ResourceGroup.objects.get(slug="vision"))
    profile = Profile.objects.create(name="Small GPU", kinds=["training"], gpus_milli=1000, cpus_milli=8000,
                                     memory_mib=64 * 1024, hours=Decimal(8))  # fmt: skip
    profile.queues.add(Queue.objects.get(slug="train"))
    now = timezone.now()
    grant = QuotaGrant.objects.create(team=ResourceGroup.objects.get(slug="vision"), fabric=h100, gpus_milli=1000,
                                      starts_at=now, ends_at=now + timedelta(days=3), reason="deadline",
                                      state=QuotaGrant.State.APPROVED)  # fmt: skip
    cloud = Fabric.objects.create(name="cloud", kind="agent", gpus_milli=0)
    pool = BurstPool.objects.create(fabric=cloud, provider="ec2", credentials="env:AWS", region="eu-west-1",
                                    zones=["eu-west-1a"], image="ami-123", server_url="https://gridlane.example",
                                    agent_group=research, budget_per_hour=Decimal(10),
                                    budget_per_month=Decimal(1000))  # fmt: skip
    InstanceType.objects.create(pool=pool, name="g5.xlarge", gpu_model="a10g", gpus=1, cpus=4, memory_gib=16,
                                price_on_demand=Decimal("1.006"))  # fmt: skip
    return {"department": research, "fabric": h100, "tier": tier, "grant": grant, "pool": pool, **cast}
