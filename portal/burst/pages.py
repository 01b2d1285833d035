"""What IT's burst page shows, read in a fixed number of queries: per pool its instances by state with age,
cost so far and what they run; spend against budget by day; the instance types and zones it keeps off for now (no
capacity there, or a type the provider does not know); and the autoscaler's decisions with reasons."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from decimal import Decimal

from portal.agents.models import Claim
from portal.burst.autoscale import LIVE, month_start
from portal.burst.models import BurstPool, Cooldown, Decision, Instance

DAYS = 14
DECISIONS = 30
ORDER = {s: i for i, s in enumerate(Instance.State.values)}


@dataclass
class InstanceRow:
    instance: Instance
    age: timedelta
    cost: Decimal
    running: list[str]

    @property
    def minutes(self) -> int:
        return max(0, int(self.age.total_seconds() // 60))


@dataclass
class DayRow:
    day: date
    spent: Decimal
    budget: Decimal  # the month's budget spread over its days

    @property
    def percent(self) -> float:
        return float(self.spent / self.budget * 100) if self.budget else 0.0


@dataclass
class PoolPage:
    pool: BurstPool
    instances: list[InstanceRow] = field(default_factory=list)
    days: list[DayRow] = field(default_factory=list)
    decisions: list[Decision] = field(default_factory=list)
    cooldowns: list[Cooldown] = field(default_factory=list)  # in force now, the soonest to end first
    rate: Decimal = Decimal(0)  # per hour, of the instances live now
    month: Decimal = Decimal(0)

    @property
    def month_percent(self) -> float:
        return float(self.month / self.pool.budget_per_month * 100) if self.pool.budget_per_month else 0.0

    @property
    def rate_percent(self) -> float:
        return float(self.rate / self.pool.budget_per_hour * 100) if self.pool.budget_per_hour else 0.0


def pool_pages(now: datetime) -> list[PoolPage]:
    """Five queries, whatever the number of pools and instances."""
    pools = {p.pk: PoolPage(p) for p in BurstPool.objects.select_related("fabric")}
    since = min(now - timedelta(days=DAYS), month_start(now))
    instances = list(Instance.objects.filter(pool_id__in=pools).exclude(gone_at__lt=since).order_by("requested_at"))
    names = [i.host_name for i in instances if i.host_name and i.state in LIVE]
    running: defaultdict[str, list[str]] = defaultdict(list)
    for host, name in Claim.objects.filter(host__name__in=names, state=Claim.ClaimState.RUNNING).values_list(
        "host__name", "workload__name"
    ):
        running[host].append(name)
    first_day = (now - timedelta(days=DAYS - 1)).date()
    for inst in instances:
        page = pools[inst.pool_id]
        if inst.state != Instance.State.GONE:
            start = inst.launched_at or inst.requested_at
            page.instances.append(InstanceRow(inst, now - start, inst.cost(now), running.get(inst.host_name, [])))
            if inst.state in LIVE:
                page.rate += inst.price_per_hour
        page.month += _cost_between(inst, month_start(now), now)
    for page in pools.values():
        page.instances.sort(key=lambda r: (ORDER.get(r.instance.state, 99), -r.age.total_seconds()))
        per_day = page.pool.budget_per_month / Decimal(30)
        for n in range(DAYS):
            day = first_day + timedelta(days=n)
            start = datetime(day.year, day.month, day.day, tzinfo=now.tzinfo)
            end = min(start + timedelta(days=1), now)
            spent = sum((_cost_between(i, start, end) for i in instances if i.pool_id == page.pool.pk), Decimal(0))
            page.days.append(DayRow(day, spent.quantize(Decimal("0.01")), per_day.quantize(Decimal("0.01"))))
    cooldowns = Cooldown.objects.filter(pool_id__in=pools, until__gt=now).order_by("until", "instance_type", "zone")
    for cooldown in cooldowns:
        pools[cooldown.pool_id].cooldowns.append(cooldown)
    for decision in Decision.objects.filter(pool_id__in=pools).order_by("-at", "-pk")[: DECISIONS * max(1, len(pools))]:
        page = pools[decision.pool_id]
        if len(page.decisions) < DECISIONS:
            page.decisions.append(decision)
    return list(pools.values())


def _cost_between(inst: Instance, start: datetime, end: datetime) -> Decimal:
    if inst.launched_at is None:
        return Decimal(0)
    a, b = max(inst.launched_at, start), min(inst.gone_at or end, end)
    if b <= a:
        return Decimal(0)
    return inst.price_per_hour * Decimal((b - a).total_seconds()) / Decimal(3600)
