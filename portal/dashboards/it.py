"""IT's views of the whole site, read in a fixed number of queries: queues, fabrics, and capacity planning
(pending demand against capacity per GPU flavor over time, from the hourly rollups)."""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal

from django.conf import settings
from django.db.models import F, Q, Sum
from django.utils import timezone

from fabrics.base import Resources
from portal import words
from portal.burst.models import Instance
from portal.dashboards import figures
from portal.dashboards.data import WINDOWS
from portal.queues.models import Fabric, KueueSync, Queue, QueueTarget, Quota, QuotaGrant
from portal.usage.models import UsageRollup
from portal.usage.rollup import HOUR, hour_of, hours_between
from portal.worker.capacity import fresh
from portal.workloads.models import Workload
from portal.workloads.states import ACTIVE
from portal.workloads.stats import QueueFigures, queue_figures

# Above this share of hours with demand over capacity, the page says to buy or burst.
SHORT_HOURS_SIGNAL = 0.1


@dataclass(frozen=True)
class QueueRow:
    figures: QueueFigures
    fabrics: list[Fabric]

    @property
    def healthy(self) -> bool:
        return bool(self.fabrics) and all(f.healthy and f.enabled for f in self.fabrics)


def queue_rows() -> list[QueueRow]:
    """Backlog, running, p95 wait and fabric health per queue: four queries."""
    queues = list(Queue.objects.order_by("slug"))
    fabrics: defaultdict[int, list[Fabric]] = defaultdict(list)
    for target in QueueTarget.objects.select_related("fabric").order_by("queue_id", "order"):
        fabrics[target.queue_id].append(target.fabric)
    by_pk = {f.queue.pk: f for f in queue_figures(queues)}
    return [QueueRow(by_pk[q.pk], fabrics[q.pk]) for q in queues if q.pk in by_pk]


@dataclass(frozen=True)
class FabricRow:
    fabric: Fabric
    gpus_in_use: float
    fresh: bool = False  # the fabric's last answer is recent enough for the scheduler to plan with
    cpus_in_use: float = 0.0
    memory_gb_in_use: float = 0.0
    reserved_gpus: float = 0.0  # teams' reservations there, with the grants in force (reserved_on)

    @property
    def over_reserved(self) -> bool:
        """More GPUs are reserved there than IT declared: the teams cannot all have theirs at once."""
        return self.reserved_gpus > self.gpus

    @property
    def cpus(self) -> float:
        return self.fabric.cpus_milli / 1000

    @property
    def memory_gb(self) -> float:
        return self.fabric.memory_mib / 1024

    @property
    def gpus(self) -> float:
        """As IT declared."""
        return self.fabric.gpus_milli / 1000

    @property
    def observed(self) -> Resources | None:
        """What the fabric last reported, or None before its first answer."""
        return self.fabric.observed

    @property
    def observed_gpus(self) -> float | None:
        return None if self.observed is None else self.observed.gpus_milli / 1000

    @property
    def observed_cpus(self) -> float | None:
        return None if self.observed is None else self.observed.cpus_milli / 1000

    @property
    def observed_memory_gb(self) -> float | None:
        return None if self.observed is None else self.observed.memory_mib / 1024

    @property
    def use_percent(self) -> float:
        return 100 * self.gpus_in_use / self.gpus if self.gpus else 0.0

    @property
    def kueue_owned(self) -> bool:
        return self.fabric.kind == "kubernetes" and bool((self.fabric.settings or {}).get("kueue_owned"))

    @property
    def kueue(self) -> KueueSync | None:
        """How its Kueue objects stood at the last reconcile; None before the first."""
        return getattr(self.fabric, "kueue_sync", None)


def fabric_rows() -> list[FabricRow]:
    """Declared and observed capacity, GPUs, CPUs and memory held by active work, health: two queries."""
    now = timezone.now()
    held = {
        fabric_id: (g or 0, c or 0, m or 0)
        for fabric_id, g, c, m in Workload.objects.filter(state__in=ACTIVE, fabric__isnull=False)
        .values("fabric_id")
        .annotate(
            g=Sum(F("gpus_milli") * F("nodes")),
            c=Sum(F("cpus_milli") * F("nodes")),
            m=Sum(F("memory_mib") * F("nodes")),
        )
        .values_list("fabric_id", "g", "c", "m")
    }
    fabrics = Fabric.objects.select_related("kueue_sync").order_by("name")
    reserved = reserved_on(now)
    rows = []
    for f in fabrics:
        g, c, m = held.get(f.pk, (0, 0, 0))
        rows.append(FabricRow(f, g / 1000, fresh(f, now), cpus_in_use=c / 1000, memory_gb_in_use=m / 1024,
                              reserved_gpus=reserved.get(f.pk, 0) / 1000))  # fmt: skip
    return rows


def reserved_on(now: datetime) -> dict[int, int]:
    """GPUs (milli) reserved on each fabric: each team's reservation there plus its approved grants in force, and a
    department's own where it is more than its teams' together (a department's reservation holds its teams');
    two queries."""
    own: defaultdict[int, dict[int, int]] = defaultdict(dict)  # fabric -> group -> reserved
    parent: dict[int, int | None] = {}
    quotas = Quota.objects.filter(fabric__isnull=False, gpu_reservation_milli__gt=0)
    for fabric_id, group_id, parent_id, milli in quotas.values_list(
        "fabric_id", "group_id", "group__parent_id", "gpu_reservation_milli"
    ):
        own[fabric_id][group_id] = milli
        parent[group_id] = parent_id
    grants = QuotaGrant.objects.filter(state=QuotaGrant.State.APPROVED, starts_at__lte=now, ends_at__gt=now)
    for fabric_id, team_id, parent_id, milli in grants.values_list("fabric_id", "team_id", "team__parent_id",
                                                                   "gpus_milli"):  # fmt: skip
        own[fabric_id][team_id] = own[fabric_id].get(team_id, 0) + milli
        parent[team_id] = parent_id
    out = {}
    for fabric_id, groups in own.items():
        below: defaultdict[int, int] = defaultdict(int)  # a department -> its teams' reservations there
        for group_id, milli in groups.items():
            up = parent.get(group_id)
            if up is not None and up in groups:
                below[up] += milli
        out[fabric_id] = sum(max(milli, below.get(g, 0)) for g, milli in groups.items() if parent.get(g) not in groups)
    return out


@dataclass(frozen=True)
class FlavorPlan:
    flavor: str
    capacity: float
    short_hours: int
    hours: int
    figure: figures.Figure
    choice: BuyOrBurst
    cpus: float = 0.0  # the site's own CPUs and memory (GB) behind the flavor, beside its GPUs
    memory_gb: float = 0.0
    most_cpus_held: float = 0.0  # the most CPUs and memory held in any hour of the window (hour-averaged)
    most_memory_gb_held: float = 0.0

    @property
    def signal(self) -> bool:
        return self.hours > 0 and self.short_hours / self.hours > SHORT_HOURS_SIGNAL


@dataclass(frozen=True)
class BuyOrBurst:
    """ "Do we buy more GPUs or burst to cloud", in numbers, for one flavor over the window."""

    short_gpu_hours: float  # demand above the site's own capacity (in use plus waiting, hour by hour)
    gpus_to_buy: int  # GPUs that would have covered 95 % of the hours (the 95th percentile of the shortfall)
    burst_spend: Decimal  # what burst instances of this flavor cost in the window
    burst_gpu_hours: float  # what they held
    window_days: float
    gpu_month_price: Decimal | None  # IT's monthly cost of one owned GPU (GRIDLANE_GPU_MONTH_PRICE), if set

    @property
    def burst_rate(self) -> Decimal | None:
        """What a burst GPU-hour cost in the window (None: no burst ran)."""
        if not self.burst_gpu_hours:
            return None
        return (self.burst_spend / Decimal(str(self.burst_gpu_hours))).quantize(Decimal("0.0001"))

    @property
    def burst_per_month(self) -> Decimal | None:
        """The shortfall served by burst at the window's rate, per 30 days."""
        rate = self.burst_rate
        if rate is None or not self.window_days:
            return None
        return (rate * Decimal(str(self.short_gpu_hours)) * Decimal(30) / Decimal(str(self.window_days))).quantize(
            Decimal("0.01")
        )

    @property
    def buy_per_month(self) -> Decimal | None:
        if self.gpu_month_price is None:
            return None
        return (self.gpu_month_price * self.gpus_to_buy).quantize(Decimal("0.01"))

    @property
    def verdict(self) -> str:
        if not self.short_gpu_hours:
            return "nothing to buy or burst for: demand stayed within capacity"
        burst, buy = self.burst_per_month, self.buy_per_month
        if burst is None or buy is None:
            return ""  # the numbers are shown; a comparison needs both prices
        if buy < burst:
            return f"buy: {words.gpus(self.gpus_to_buy)} at {buy} a month cost less than bursting at {burst} a month"
        return f"burst: {burst} a month costs less than {words.gpus(self.gpus_to_buy)} bought at {buy} a month"


def capacity_plan(window: str, now: datetime) -> list[FlavorPlan]:
    """Per GPU flavor: use plus waiting demand per hour against the flavor's capacity (three queries).

    A queue's hours count against the flavor of its first target (where its work goes when there is room)."""
    start = hour_of(now) - WINDOWS[window] + HOUR
    hours = list(hours_between(start, now))
    fabrics = list(Fabric.objects.filter(enabled=True).select_related("burst_pool"))
    capacity: defaultdict[str, float] = defaultdict(float)
    cpus_of: defaultdict[str, float] = defaultdict(float)
    memory_of: defaultdict[str, float] = defaultdict(float)
    for f in fabrics:
        if not hasattr(f, "burst_pool"):  # a burst pool is declared as big as it may grow: not the site's own
            capacity[f.gpu_flavor or "unnamed"] += f.gpus_milli / 1000
            cpus_of[f.gpu_flavor or "unnamed"] += f.cpus_milli / 1000
            memory_of[f.gpu_flavor or "unnamed"] += f.memory_mib / 1024
    flavor_of: dict[int, str] = {}
    for queue_id, flavor in QueueTarget.objects.order_by("queue_id", "-order").values_list(
        "queue_id", "fabric__gpu_flavor"
    ):
        flavor_of[queue_id] = flavor or "unnamed"  # the lowest order wins: it comes last
    used, pending, cpus, memory = _held_by_flavor(start, hours, flavor_of)
    spend, held = burst_in_window(start, now)
    days = (now - start).total_seconds() / 86400
    price = settings.GRIDLANE_GPU_MONTH_PRICE
    plans = []
    for flavor in sorted(capacity):
        u, p, cap = used[flavor], pending[flavor], capacity[flavor]
        over = [max(0.0, a + b - cap) for a, b in zip(u, p, strict=True)]
        short = sum(1 for o in over if o > 0)
        title = f"{flavor}: demand against {words.gpus(cap)}"
        fig = figures.demand_against_capacity(hours, u, p, cap, title)
        choice = BuyOrBurst(sum(over), math.ceil(percentile(over, 0.95)), spend[flavor], held[flavor], days, price)
        held_most = (max(cpus[flavor], default=0.0), max(memory[flavor], default=0.0))
        plans.append(FlavorPlan(flavor, cap, short, len(hours), fig, choice, cpus_of[flavor], memory_of[flavor],
                                *held_most))  # fmt: skip
    return plans


Series = defaultdict[str, list[float]]


def _held_by_flavor(
    start: datetime, hours: list[datetime], flavor_of: dict[int, str]
) -> tuple[Series, Series, Series, Series]:
    """Per flavor, hour by hour: GPUs in use and waiting, CPUs and memory (GB) held, from the rollups (one
    query). A queue's hours count against the flavor of its first target."""
    index = {h: i for i, h in enumerate(hours)}
    series: list[Series] = [defaultdict(lambda: [0.0] * len(hours)) for _ in range(4)]
    rows = (
        UsageRollup.objects.filter(hour__gte=start)
        .values("queue_id", "hour")
        .annotate(
            used=Sum("gpu_hours"),
            pending=Sum("pending_gpu_hours"),
            cpus=Sum("cpu_hours"),
            memory=Sum("memory_gb_hours"),
        )
        .values_list("queue_id", "hour", "used", "pending", "cpus", "memory")
    )
    for queue_id, hour, *values in rows:
        i = index.get(hour)
        queue_flavor = flavor_of.get(queue_id)
        if i is None or queue_flavor is None:
            continue
        for figure, value in zip(series, values, strict=True):
            figure[queue_flavor][i] += value or 0.0
    return series[0], series[1], series[2], series[3]


def burst_in_window(start: datetime, now: datetime) -> tuple[defaultdict[str, Decimal], defaultdict[str, float]]:
    """Per flavor: what burst instances cost between start and now, and the GPU-hours they held (one query)."""
    spend: defaultdict[str, Decimal] = defaultdict(Decimal)
    held: defaultdict[str, float] = defaultdict(float)
    ran = Instance.objects.filter(launched_at__lt=now).filter(Q(gone_at__isnull=True) | Q(gone_at__gt=start))
    for inst in ran.select_related("pool__fabric"):
        begin, end = max(inst.launched_at or start, start), min(inst.gone_at or now, now)
        hours = max(0.0, (end - begin).total_seconds() / 3600)
        flavor = inst.pool.fabric.gpu_flavor or "unnamed"
        spend[flavor] += (inst.price_per_hour * Decimal(str(hours))).quantize(Decimal("0.0001"))
        held[flavor] += hours * inst.gpus
    return spend, held


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else 0.0
