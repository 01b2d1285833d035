"""The autoscaler's worker step, per burst pool:

1. Ask the provider for the pool's instances (by tag) and reconcile them with our records: attach launches
   a crash left unrecorded, notice instances the provider reclaimed (their work goes back in line), report
   instances nobody recorded and terminate them after a grace period.
2. Follow each instance's agent: enrolled, busy, idle.
3. Retry launches whose intent was recorded but that never reached the provider.
4. Decide (scheduler.burst.plan) on the work that waits for capacity by the scheduler's own reasons, with the
   room free on the fabrics its queues try first, how long the pool's instances take to boot, and what runs on
   each instance (young work that may go back in line moves back on premises when there is room for it).
5. Terminate, then launch: intent first (the row and its launch id), then the provider, falling back to the
   next zone and type on capacity errors.

Every decision is recorded with its reason for the IT pages.
"""

from __future__ import annotations

import logging
import uuid
from collections import Counter
from collections.abc import Sequence
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any, NoReturn

from django.conf import settings
from django.db.models import Count, F, Max, Q, Sum

from fabrics.base import Resources
from fabrics.cloud import bootscript, registry
from fabrics.cloud.base import CloudError, ErrorKind, LaunchRequest, Provider, ProviderConfig, resolve
from fabrics.cloud.base import Instance as CloudInstance
from portal.agents import services as agents
from portal.agents.models import AgentHost, Claim
from portal.burst import enrollment, observe
from portal.burst.models import BurstPool, Cooldown, Decision, Instance, InstanceType
from portal.queues import capacity
from portal.queues.models import Fabric, Queue, QueueTarget, Quota
from portal.workloads.models import Workload
from portal.workloads.states import ACTIVE, State
from scheduler import burst, reasons

log = logging.getLogger("gridlane.burst")

# The scheduler's reasons that mean "waits for capacity": a burst can help. Never a team's own limit.
CAPACITY_CODES = (
    reasons.NO_CAPACITY,
    reasons.GANG_DOES_NOT_FIT,
    reasons.BEHIND_HIGHER_PRIORITY,
    reasons.HELD_FOR_RESERVATIONS,
    reasons.TOO_BIG,
)
LIVE = (Instance.State.PENDING, Instance.State.BOOTING, Instance.State.ENROLLED, Instance.State.BUSY,
        Instance.State.IDLE)  # fmt: skip
MAX_DEMAND = 10_000  # the oldest waiting workloads looked at per pool and step
CAPACITY_COOLDOWN = timedelta(minutes=10)  # a type with no capacity in a zone is not tried there for this long
INVALID_COOLDOWN = timedelta(hours=1)  # a type the provider does not know, in any zone
BOOT_SAMPLE = 20  # the pool's most recent boots that its expected boot time is the median of
MONTH_HORIZON = timedelta(minutes=15)  # launches and running instances are counted this far ahead against the month


class Cooling:
    """The pool's cooldowns (portal.burst.models.Cooldown): read once per step, written as launches meet refusals,
    so that a restarted worker or another worker process keeps off a type and zone with no capacity."""

    def __init__(self, pool: BurstPool, now: datetime) -> None:
        self.pool, self.now = pool, now
        Cooldown.objects.filter(pool=pool, until__lte=now).delete()
        self.until = {(c.instance_type, c.zone): c.until for c in Cooldown.objects.filter(pool=pool)}

    def blocked(self, name: str, zone: str = "") -> bool:
        """Whether the type is not to be tried in the zone (or, with no zone, anywhere) now."""
        keys = ((name, ""), (name, zone)) if zone else ((name, ""),)
        return any(self.until.get(key, self.now) > self.now for key in keys)

    def usable(self, name: str) -> bool:
        """Whether some zone of the pool may be tried for the type now."""
        return any(not self.blocked(name, zone) for zone in _zones(self.pool))

    def start(self, name: str, zone: str, why: str, code: str, length: timedelta) -> None:
        until = self.now + length
        self.until[(name, zone)] = until
        Cooldown.objects.update_or_create(
            pool=self.pool, instance_type=name, zone=zone, defaults={"why": why, "code": code[:80], "until": until}
        )


class _Stop(Exception):
    """The provider refused in a way that stops this pool's step (credentials, throttling, no answer)."""


# When this process last ran the step from the periodic cycle: every step asks each provider, which throttles.
_last_periodic: dict[str, datetime] = {}


def periodic(now: datetime) -> dict[str, int]:
    """The cycle's step: at most once per GRIDLANE_CAPACITY_SECONDS (as often as fabrics are asked what they
    have), so a 2-second cycle does not call a provider's API every 2 seconds."""
    pools = _enabled()  # one query whether or not the step is due: a cycle's query count stays the same
    last = _last_periodic.get("step")
    if not pools or (last is not None and last <= now < last + timedelta(seconds=settings.GRIDLANE_CAPACITY_SECONDS)):
        return {}
    _last_periodic["step"] = now
    return step(now, pools)


def _enabled() -> list[BurstPool]:
    return list(BurstPool.objects.filter(enabled=True, fabric__enabled=True).select_related("fabric"))


def step(now: datetime, pools: list[BurstPool] | None = None) -> dict[str, int]:
    done: Counter[str] = Counter()
    for pool in _enabled() if pools is None else pools:
        try:
            done.update(run(pool, now))
        except Exception:  # one pool's bug must not stop the others, nor the worker's cycle
            log.exception("burst pool %s", pool.name)
    return dict(done)


def connect(pool: BurstPool) -> Provider:
    credentials = resolve(pool.credentials, kind=pool.provider)
    config = ProviderConfig(pool.provider, pool.name, pool.region, credentials, endpoint_url=pool.endpoint_url)
    return registry.connect(config)


def run(pool: BurstPool, now: datetime) -> Counter[str]:
    done: Counter[str] = Counter()
    types = list(pool.instance_types.all())
    size_fabric(pool, types)
    try:
        provider = connect(pool)
        described = provider.describe(pool.name)
    except CloudError as error:
        note(pool, Decision.Action.FAIL, f"{pool.provider} could not be asked about the pool's instances: {error}")
        return done
    cooling = Cooling(pool, now)
    try:
        # 1. Reconcile with what the provider has.
        done.update(reconcile(pool, provider, described, now))
        # 2. Follow the agents.
        rooms = follow_agents(pool, types, now)
        # 3. Intents that never reached the provider.
        for inst in Instance.objects.filter(pool=pool, state=Instance.State.PENDING, provider_id=""):
            done["launched"] += launch(pool, provider, inst, [inst.instance_type], now, cooling)
        # 4. Decide.
        live = list(Instance.objects.filter(pool=pool, state__in=LIVE))
        waiting, headroom = demand(pool)
        work = running_work(pool, live)
        plan = burst.plan(now, pool_values(pool, now), offers(pool, types, cooling), [
            burst.Live(str(i.pk), i.instance_type, i.state, float(i.price_per_hour), rooms.get(i.pk, capacity_of(i)),
                       i.requested_at, i.idle_since, work.get(i.pk, ())) for i in live
        ], waiting, headroom, room_before(pool, now))  # fmt: skip
        for held in plan.held:
            note(pool, Decision.Action.HOLD, held)
        # 5. Terminate, then launch.
        for end in plan.terminate:
            done["terminated"] += terminate(pool, provider, int(end.id), end.reason, now)
        by_name = {t.name: t for t in types}
        for want in plan.launch:
            inst = intent(pool, by_name[want.instance_type], want, now)
            choices = [want.instance_type, *want.alternatives]
            done["launched"] += launch(pool, provider, inst, choices, now, cooling)
    except _Stop:
        pass
    return done


# -- 1. reconcile ---------------------------------------------------------------------------------------
def reconcile(pool: BurstPool, provider: Provider, described: Sequence[CloudInstance], now: datetime) -> Counter[str]:
    done: Counter[str] = Counter()
    records = list(Instance.objects.filter(pool=pool).exclude(state=Instance.State.GONE))
    by_launch = {str(r.launch_id): r for r in records if r.launch_id}
    by_id = {r.provider_id: r for r in records if r.provider_id}
    seen: set[int] = set()
    for cloud in described:
        rec = by_id.get(cloud.id) or by_launch.get(cloud.launch_id)
        if rec is None:
            if not cloud.state.gone:
                done["orphans"] += unknown(pool, provider, cloud, now)
            continue
        seen.add(rec.pk)
        if rec.state == Instance.State.ORPHAN:
            if cloud.state.gone:
                gone(rec, now, rec.reason)
            elif now - rec.requested_at >= timedelta(minutes=pool.orphan_grace_minutes):
                _terminate_quietly(provider, cloud.id)
                Instance.objects.filter(pk=rec.pk).update(state=Instance.State.TERMINATING, terminate_requested_at=now)
                note(pool, Decision.Action.ORPHAN, f"terminated {cloud.id}: no Gridlane record after the grace "
                     f"period of {pool.orphan_grace_minutes} min", rec)  # fmt: skip
            continue
        if not rec.provider_id:  # launched, then the worker stopped before recording
            rec.provider_id, rec.launched_at = cloud.id, cloud.launched_at or now
            fields: dict[str, Any] = {"provider_id": cloud.id, "launched_at": rec.launched_at}
            if rec.state == Instance.State.PENDING:
                rec.state = fields["state"] = Instance.State.BOOTING
            Instance.objects.filter(pk=rec.pk).update(**fields)
            note(pool, Decision.Action.LAUNCH, f"found {cloud.id} ({rec.instance_type}) by its launch tag: "
                 "launched before the worker stopped, recorded now", rec)  # fmt: skip
        if cloud.state.gone:
            if rec.state == Instance.State.TERMINATING:
                gone(rec, now, rec.reason)
            else:
                reclaimed(pool, rec, cloud.reason, now)
        elif rec.state == Instance.State.TERMINATING:
            _terminate_quietly(provider, cloud.id)  # asked before and still running: ask again
    for rec in records:
        if rec.pk in seen or not rec.provider_id:
            continue
        if rec.state in (Instance.State.TERMINATING, Instance.State.ORPHAN):
            gone(rec, now, rec.reason)
        else:
            reclaimed(pool, rec, "the provider no longer lists it", now)
    return done


def unknown(pool: BurstPool, provider: Provider, cloud: CloudInstance, now: datetime) -> int:
    """An instance tagged with the pool that no live record names: one we gave up on ends at once; any other
    is reported, and terminated after the grace period."""
    if cloud.launch_id and Instance.objects.filter(pool=pool, launch_id=_uuid(cloud.launch_id)).exists():
        _terminate_quietly(provider, cloud.id)
        note(pool, Decision.Action.ORPHAN, f"terminated {cloud.id}: its launch had been given up on")
        return 1
    rec = Instance.objects.create(
        pool=pool, state=Instance.State.ORPHAN, provider_id=cloud.id, instance_type=cloud.instance_type,
        zone=cloud.zone, spot=cloud.spot, requested_at=now, launched_at=cloud.launched_at,
        reason="tagged with this pool, but Gridlane has no record of it",
    )  # fmt: skip
    note(pool, Decision.Action.ORPHAN, f"found {cloud.id} ({cloud.instance_type}) tagged with this pool and no "
         f"Gridlane record: terminating it in {pool.orphan_grace_minutes} min unless one turns up", rec)  # fmt: skip
    return 1


def reclaimed(pool: BurstPool, rec: Instance, why: str, now: datetime) -> None:
    """The provider ended an instance we did not ask to end (a spot reclaim): its work goes back in line."""
    kind = "spot instance" if rec.spot else "instance"
    reason = f"{kind} {rec.provider_id} ({rec.instance_type}) was reclaimed by the provider"
    if why:
        reason += f" ({why})"
    if not gone(rec, now, reason):
        return
    host = AgentHost.objects.filter(fabric_id=pool.fabric_id, name=rec.host_name).first() if rec.host_name else None
    if host is not None:
        agents.lose(host, reason)
    # The fabric is smaller now: ask it at once, so that the next admission does not hand the reclaimed
    # work to capacity that is gone (it would wait there, dispatched, and no instance would start for it).
    fabric = Fabric.objects.filter(pk=pool.fabric_id).first()
    if fabric is not None:
        observe.now(fabric, now)
    note(pool, Decision.Action.REPLACE, f"{reason}; its work goes back in line, and an instance starts again if "
         "work still waits", rec)  # fmt: skip


def gone(rec: Instance, now: datetime, reason: str) -> bool:
    """Record the end; False when another step recorded it first."""
    if (
        not Instance.objects.filter(pk=rec.pk)
        .exclude(state=Instance.State.GONE)
        .update(state=Instance.State.GONE, gone_at=now, reason=reason[:300])
    ):
        return False
    rec.state, rec.gone_at = Instance.State.GONE, now
    if rec.launch_id:
        enrollment.retire(rec)
    return True


# -- 2. the agents ----------------------------------------------------------------------------------------
def follow_agents(pool: BurstPool, types: Sequence[InstanceType], now: datetime) -> dict[int, Resources]:
    """Move instances along enrolled -> busy -> idle from their agents; returns what each can still take."""
    live = [i for i in Instance.objects.filter(pool=pool, state__in=LIVE) if i.host_name]
    hosts = {
        h.name: h for h in AgentHost.objects.filter(fabric_id=pool.fabric_id, name__in=[i.host_name for i in live])
    }
    is_running = Q(state=Claim.ClaimState.RUNNING)
    claims = {
        row["host__name"]: row
        for row in Claim.objects.filter(host__in=hosts.values())
        .values("host__name")
        .annotate(
            n=Count("pk", filter=is_running),
            gpus=Sum("gpus_milli", filter=is_running),
            ran=Count("pk"),
            last=Max("finished_at"),
        )
    }
    # Work admitted to the pool that no agent took yet will take room on an instance that has some.
    waiting_claims = Claim.objects.filter(fabric_id=pool.fabric_id, state=Claim.ClaimState.CLAIMABLE)
    committed = waiting_claims.aggregate(g=Sum("gpus_milli"))["g"] or 0
    rooms: dict[int, Resources] = {}
    for inst in live:
        host = hosts.get(inst.host_name)
        row = claims.get(inst.host_name) or {}
        jobs, gpus, ran = row.get("n") or 0, row.get("gpus") or 0, row.get("ran") or 0
        state, fields = inst.state, dict[str, Any]()
        online = host is not None and host.state == AgentHost.HostState.ONLINE
        if inst.state == Instance.State.BOOTING and online:
            state, fields = Instance.State.ENROLLED, {"enrolled_at": now, "idle_since": now}
        if state in (Instance.State.ENROLLED, Instance.State.IDLE) and jobs:
            state, fields = Instance.State.BUSY, fields | {"idle_since": None}
        elif (state == Instance.State.BUSY or (state == Instance.State.ENROLLED and ran)) and not jobs:
            # Idle since its last job ended (one may have come and gone between two looks).
            state, fields = Instance.State.IDLE, {"idle_since": min(row.get("last") or now, now)}
        if state != inst.state:
            Instance.objects.filter(pk=inst.pk, state=inst.state).update(state=state, **fields)
        if inst.state in (Instance.State.PENDING, Instance.State.BOOTING) and state == inst.state:
            continue  # on its way: all of it (the plan's default)
        cap = capacity_of(inst)
        free = Resources(cap.gpus_milli - gpus, cap.cpus_milli, cap.memory_mib) if online else Resources()
        take = min(committed, max(0, free.gpus_milli))
        committed -= take
        rooms[inst.pk] = Resources(free.gpus_milli - take, free.cpus_milli, free.memory_mib)
    return rooms


def running_work(pool: BurstPool, live: Sequence[Instance]) -> dict[int, tuple[burst.Work, ...]]:
    """What runs on each instance's agent: when it started, its runtime limit, and whether its queue puts it back
    in line when the host is lost (agents.lose), as it is when the plan ends an instance to move its work."""
    by_host = {i.host_name: i.pk for i in live if i.host_name}
    rows = Claim.objects.filter(
        fabric_id=pool.fabric_id, state=Claim.ClaimState.RUNNING, host__name__in=list(by_host)
    ).values_list("host__name", "started_at", "workload__runtime_limit_s", "workload__queue__preemptible")
    work: dict[int, list[burst.Work]] = {}
    for host, started, limit, preemptible in rows:
        work.setdefault(by_host[host], []).append(burst.Work(started, timedelta(seconds=limit), preemptible))
    return {pk: tuple(w) for pk, w in work.items()}


def capacity_of(inst: Instance) -> Resources:
    return Resources(inst.gpus * 1000, inst.cpus * 1000, inst.memory_gib * 1024)


# -- 4. what the plan is made of --------------------------------------------------------------------------
def demand(pool: BurstPool) -> tuple[list[burst.Waiting], dict[int, Resources]]:
    """The work that waits for capacity on queues that burst to this pool, oldest first; and each team's room
    under its limit on the pool."""
    rows = (
        Workload.objects.filter(state=State.PENDING, pending_reason_code__in=CAPACITY_CODES,
                                queue__targets__fabric_id=pool.fabric_id)
        .order_by("submitted_at")
        .values_list("id", "group_id", "group__slug", "gpus_milli", "cpus_milli", "memory_mib", "nodes", "submitted_at",
                     "estimated_start", "runtime_limit_s")
    )[:MAX_DEMAND]  # fmt: skip
    # estimated_start: the scheduler's own estimate of when it starts where it waits now (the last admission's).
    waiting = [
        burst.Waiting(str(pk), group_id, slug, Resources(gpus, cpus, memory), since, nodes, expected,
                      timedelta(seconds=limit))
        for pk, group_id, slug, gpus, cpus, memory, nodes, since, expected, limit in rows
    ]  # fmt: skip
    used = {
        row["group_id"]: Resources(row["g"] or 0, row["c"] or 0, row["m"] or 0)
        for row in Workload.objects.filter(fabric_id=pool.fabric_id, state__in=ACTIVE)
        .values("group_id")
        .annotate(g=Sum("gpus_milli"), c=Sum("cpus_milli"), m=Sum("memory_mib"))
    }
    headroom = {}
    unlimited = 1 << 62
    for quota in Quota.objects.filter(fabric_id=pool.fabric_id):
        limit = Resources(
            unlimited if quota.gpu_limit_milli is None else quota.gpu_limit_milli,
            unlimited if quota.cpu_limit_milli is None else quota.cpu_limit_milli,
            unlimited if quota.memory_limit_mib is None else quota.memory_limit_mib,
        )
        headroom[quota.group_id] = limit - used.get(quota.group_id, Resources())
    return waiting, headroom


def room_before(pool: BurstPool, now: datetime) -> list[Resources]:
    """The room free now on each fabric that a queue bursting to the pool tries before it (capacity to plan with,
    less the work holding it). None while work admitted to the pool waits for an agent to take it: an idle
    instance may be where it lands, so none ends before its max idle time."""
    if Claim.objects.filter(fabric_id=pool.fabric_id, state=Claim.ClaimState.CLAIMABLE).exists():
        return []
    targets = QueueTarget.objects.filter(queue__targets__fabric_id=pool.fabric_id).values_list("queue_id", "fabric_id")
    before: set[int] = set()
    reached: set[int] = set()  # queues whose targets reached the pool
    for queue_id, fabric_id in targets:  # in each queue's order
        if fabric_id == pool.fabric_id:
            reached.add(queue_id)
        elif queue_id not in reached:
            before.add(fabric_id)
    fabrics = list(Fabric.objects.filter(pk__in=before, enabled=True))
    held = {
        row["fabric_id"]: Resources(row["g"] or 0, row["c"] or 0, row["m"] or 0)
        for row in Workload.objects.filter(fabric__in=fabrics, state__in=ACTIVE)
        .values("fabric_id")
        .annotate(g=Sum(F("gpus_milli") * F("nodes")), c=Sum(F("cpus_milli") * F("nodes")),
                  m=Sum(F("memory_mib") * F("nodes")))
    }  # fmt: skip
    rooms = [capacity.planned(f, now) - held.get(f.pk, Resources()) for f in fabrics]
    return [r for r in rooms if min(r.gpus_milli, r.cpus_milli, r.memory_mib) >= 0]


def expected_boot(pool: BurstPool) -> timedelta:
    """The median time the pool's last BOOT_SAMPLE instances took from launch to enrolled; 0 before any did."""
    booted = Instance.objects.filter(pool=pool, launched_at__isnull=False, enrolled_at__isnull=False)
    recent = booted.order_by("-enrolled_at").values_list("launched_at", "enrolled_at")[:BOOT_SAMPLE]
    boots = sorted(enrolled - launched for launched, enrolled in recent if launched and enrolled)
    return max(timedelta(0), boots[len(boots) // 2]) if boots else timedelta(0)


def offers(pool: BurstPool, types: Sequence[InstanceType], cooling: Cooling) -> list[burst.Offer]:
    """The types that may be tried now: in some zone, not cooling down there."""
    usable = [t for t in types if cooling.usable(t.name)]
    return [burst.Offer(t.name, t.gpus, t.cpus, t.memory_gib * 1024, float(t.price(pool.spot))) for t in usable]


def month_start(now: datetime) -> datetime:
    return now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)


def spent(pool: BurstPool, since: datetime, now: datetime) -> Decimal:
    """What the pool's instances cost from `since` to now."""
    total = Decimal(0)
    for inst in Instance.objects.filter(pool=pool, launched_at__isnull=False).filter(
        Q(gone_at__isnull=True) | Q(gone_at__gt=since)
    ):
        start = max(inst.launched_at or since, since)
        end = min(inst.gone_at or now, now)
        if end > start:
            total += inst.price_per_hour * Decimal((end - start).total_seconds()) / Decimal(3600)
    return total


def pool_values(pool: BurstPool, now: datetime) -> burst.Pool:
    return burst.Pool(
        pool.name,
        min_instances=pool.min_instances,
        max_instances=pool.max_instances,
        max_idle=timedelta(minutes=pool.max_idle_minutes),
        boot_timeout=timedelta(minutes=pool.boot_timeout_minutes),
        budget_per_hour=float(pool.budget_per_hour),
        budget_per_month=float(pool.budget_per_month),
        month_spent=float(spent(pool, month_start(now), now)),
        horizon=MONTH_HORIZON,
        burst_after=timedelta(minutes=pool.burst_after_minutes),
        boot=expected_boot(pool),
    )


def size_fabric(pool: BurstPool, types: Sequence[InstanceType]) -> None:
    """The pool's fabric is declared as big as the pool may grow, so that work waits for capacity there (and
    the autoscaler sees it) instead of being told it can never run; the scheduler plans with the agents online."""
    n = pool.max_instances
    size = {
        "gpus_milli": n * max((t.gpus for t in types), default=0) * 1000,
        "cpus_milli": n * max((t.cpus for t in types), default=0) * 1000,
        "memory_mib": n * max((t.memory_gib for t in types), default=0) * 1024,
    }
    fabric = pool.fabric
    if any(getattr(fabric, k) != v for k, v in size.items()):
        Fabric.objects.filter(pk=fabric.pk).update(**size)


# -- 5. terminate and launch ------------------------------------------------------------------------------
def terminate(pool: BurstPool, provider: Provider, pk: int, reason: str, now: datetime) -> int:
    rec = Instance.objects.filter(pk=pk, state__in=LIVE).first()
    if rec is None or not Instance.objects.filter(pk=pk, state=rec.state).update(
        state=Instance.State.TERMINATING, terminate_requested_at=now, reason=reason[:300]
    ):
        return 0
    host = AgentHost.objects.filter(fabric_id=pool.fabric_id, name=rec.host_name).first() if rec.host_name else None
    if host is not None:  # no more work for it; anything it still ran goes back in line where its queue allows
        agents.lose(host, f"its instance is being terminated: {reason}")
    if rec.launch_id:
        enrollment.retire(rec)
    if rec.provider_id:
        _terminate_quietly(provider, rec.provider_id)
    else:
        gone(rec, now, reason)  # never reached the provider; should it turn up after all, it ends at once
    note(pool, Decision.Action.TERMINATE, f"terminated {rec.instance_type} {rec.provider_id or '(not launched)'}: "
         f"{reason}", rec)  # fmt: skip
    return 1


def intent(pool: BurstPool, offer: InstanceType, want: burst.Launch, now: datetime) -> Instance:
    """Record what is about to be launched, before the provider hears of it."""
    launch_id = uuid.uuid4()
    return Instance.objects.create(
        pool=pool, launch_id=launch_id, instance_type=offer.name, zone=_zones(pool)[0], spot=pool.spot,
        price_per_hour=offer.price(pool.spot), gpus=offer.gpus, cpus=offer.cpus, memory_gib=offer.memory_gib,
        host_name=f"{pool.name}-{launch_id.hex[:12]}", requested_at=now, reason=want.reason[:300],
        demand=list(want.workload_ids[:200]),
    )  # fmt: skip


def launch(
    pool: BurstPool, provider: Provider, inst: Instance, type_names: Sequence[str], now: datetime, cooling: Cooling
) -> int:
    """Try each type in each zone until one launches; 1 when one did. Capacity errors move on (and keep the type
    off that zone for CAPACITY_COOLDOWN), others stop."""
    types = {t.name: t for t in pool.instance_types.all()}
    queues = list(
        Queue.objects.filter(targets__fabric_id=pool.fabric_id).order_by("slug").values_list("slug", flat=True)
    )
    tried: list[str] = []
    for name in type_names:
        offer = types.get(name)
        if offer is None or cooling.blocked(name):
            continue
        for zone in _zones(pool):
            if cooling.blocked(name, zone):
                continue
            attempt = inst.attempt + (1 if tried else 0)
            fields = {"attempt": attempt, "instance_type": name, "zone": zone, "price_per_hour": offer.price(pool.spot),
                      "gpus": offer.gpus, "cpus": offer.cpus, "memory_gib": offer.memory_gib}  # fmt: skip
            if not Instance.objects.filter(pk=inst.pk, state=Instance.State.PENDING).update(**fields):
                return 0  # ended meanwhile
            for key, value in fields.items():
                setattr(inst, key, value)
            token = enrollment.mint(inst, now, timedelta(minutes=pool.boot_timeout_minutes))
            user_data = bootscript.render(pool.boot_script, pool.server_url, token, inst.host_name, queues, offer.gpus)
            request = LaunchRequest(pool.name, str(inst.launch_id), f"{inst.launch_id}.{attempt}", name, zone,
                                    pool.image, user_data, pool.spot, inst.host_name)  # fmt: skip
            try:
                cloud = provider.launch(request)
            except CloudError as error:
                if error.kind == ErrorKind.CAPACITY:
                    tried.append(f"{name} in {zone} ({error.code})")
                    cooling.start(name, zone, Cooldown.Why.CAPACITY, error.code or "", CAPACITY_COOLDOWN)
                    continue
                if error.kind == ErrorKind.INVALID and _about_the_type(error):
                    tried.append(f"{name} ({error.code or 'refused'})")
                    cooling.start(name, "", Cooldown.Why.INVALID, error.code or "", INVALID_COOLDOWN)
                    break
                _refused(pool, inst, error, now)
            Instance.objects.filter(pk=inst.pk, state=Instance.State.PENDING).update(
                state=Instance.State.BOOTING, provider_id=cloud.id, launched_at=now
            )
            inst.state, inst.provider_id, inst.launched_at = Instance.State.BOOTING, cloud.id, now
            message = inst.reason or f"launched {name}"
            if tried:
                message = message.replace(f"launched {type_names[0]}", f"launched {name}", 1)
                message += f" (after no capacity for {', '.join(tried)})"
            note(pool, Decision.Action.LAUNCH, f"{message} [{cloud.id} in {zone}]", inst)
            return 1
    reason = f"no capacity for {', '.join(tried)}" if tried else "no instance type of the pool can be tried now"
    gone(inst, now, reason)
    note(pool, Decision.Action.FAIL, f"could not launch for: {inst.reason}; {reason}", inst)
    return 0


def _refused(pool: BurstPool, inst: Instance, error: CloudError, now: datetime) -> NoReturn:
    """A refusal that no other type or zone can help with: a retry later (throttling, no answer) keeps the
    intent for the next step; anything else ends it. Either way this pool's step stops here."""
    if error.retryable:
        note(pool, Decision.Action.FAIL, f"{pool.provider} did not launch now, trying again at the next step: {error}")
    else:
        what = "refused the pool's credentials" if error.kind == ErrorKind.CREDENTIALS else "refused the launch"
        gone(inst, now, f"{pool.provider} {what}: {error}")
        note(pool, Decision.Action.FAIL, f"{pool.provider} {what}: {error}", inst)
    raise _Stop


def _about_the_type(error: CloudError) -> bool:
    text = str(error).lower()
    return "instance type" in text or "instancetype" in text or error.code in ("InvalidInstanceType", "FlavorNotFound")


def _terminate_quietly(provider: Provider, instance_id: str) -> None:
    try:
        provider.terminate([instance_id])
    except CloudError as error:  # the record stays terminating; the next step asks again
        log.warning("terminating %s: %s", instance_id, error)


def _zones(pool: BurstPool) -> list[str]:
    return [str(z) for z in pool.zones] or [""]


def _uuid(value: str) -> uuid.UUID | None:
    try:
        return uuid.UUID(value)
    except ValueError:
        return None


def note(pool: BurstPool, action: str, message: str, instance: Instance | None = None) -> None:
    """Record a decision, unless it repeats the pool's last of its kind word for word (a held launch, every step)."""
    last = Decision.objects.filter(pool=pool, action=action).values_list("message", flat=True).first()
    if last == message[:500]:
        return
    Decision.objects.create(pool=pool, action=action, message=message[:500], instance=instance)
    log.info("burst pool %s: %s", pool.name, message)
