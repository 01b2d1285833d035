"""Read the database once per cycle into the scheduler's frozen snapshot (a fixed number of queries, the fixed
ones compiled once per process: sql.Rows)."""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping
from dataclasses import replace
from datetime import datetime
from typing import Any, NamedTuple
from uuid import UUID

from django.conf import settings
from django.db import connection
from django.db.models import F, QuerySet, Sum, Window
from django.db.models.expressions import RawSQL
from django.db.models.functions import RowNumber

from fabrics.base import Resources
from portal.accounts.models import ResourceGroup, ServiceIdentity
from portal.budgets.models import Budget
from portal.queues.models import Fabric, PriorityTier, Queue, QueueTarget, Quota, QuotaGrant
from portal.sql import ROWS, Compiled
from portal.worker import live
from portal.worker.capacity import live_since, planned
from portal.worker.models import GroupUsage
from portal.workloads import calibration, context
from portal.workloads.models import Workload
from portal.workloads.states import ACTIVE, State
from scheduler import model, reasons
from scheduler.ledger import Amount, Ledger
from scheduler.priority import allocations, average_gpus


class Row(NamedTuple):
    """What applying a decision needs to know of a workload, read as plain values (thousands per cycle)."""

    id: UUID
    state: str
    queue_id: int
    pending_reason_code: str
    pending_reason: str
    estimated_start: datetime | None
    queue_position: int


# Read as tuples, not model instances: building 15,000 instances would cost more than deciding on them.
FIELDS = (
    "id", "state", "queue_id", "pending_reason_code", "pending_reason", "estimated_start",  # -> Row
    "owner_id", "group_id", "fabric_id", "priority", "submitted_at", "started_at", "runtime_limit_s",
    "gpus_milli", "cpus_milli", "memory_mib", "nodes", "native_kind", "array_parent_id", "array_throttle",
    "gpu_type", "gpu_idle_warned_at", "queue_position",  # the last -> Row
)  # fmt: skip


def _limit(value: int | None) -> int:
    return model.UNLIMITED if value is None else value


def job_of(values: tuple[Any, ...], kinds: dict[str, tuple[int, ...]] | None = None) -> model.Job:
    """kinds: the fabric ids of each kind, for native work (which runs only where its scheduler reads it)."""
    (pk, _, queue_id, _, _, _, owner_id, group_id, fabric_id, priority, submitted_at, started_at, runtime_limit_s,
     gpus, cpus, memory, nodes, native_kind, array_parent_id, array_throttle, gpu_type, idle_warned_at,
     _) = values  # fmt: skip
    return model.Job(
        id=str(pk),
        group_id=group_id,
        queue_id=queue_id,
        per_node=Resources(gpus, cpus, memory),
        nodes=nodes,
        priority=priority,
        submitted_at=submitted_at,
        runtime_limit_s=runtime_limit_s,
        fabric_id=fabric_id,
        started_at=started_at,
        owner_id=owner_id,
        only_on=(kinds or {}).get(native_kind, ()) if native_kind else None,
        array_id=str(array_parent_id) if array_parent_id else "",
        array_throttle=array_throttle or 0,
        gpus_idle=idle_warned_at is not None,
        gpu_type=gpu_type,
    )


Entry = tuple[str, Row, model.Job]  # what a build makes of a row read: its id's text, its Row, its Job


def entry_of(values: tuple[Any, ...], kinds: dict[str, tuple[int, ...]]) -> Entry:
    return str(values[0]), Row._make((*values[:6], values[-1])), job_of(values, kinds)


# A row's version: where PostgreSQL keeps the version of the row a query sees (ctid) and the transaction that
# wrote it (xmin). Every change to a row (an UPDATE of any column, even to the values it had) writes a new
# version in a new place, by a transaction that committed after it; a place is used again only once the
# version there is gone, and then by a later transaction than the one that wrote it. Within one transaction
# (a test's, say) each change still takes a new place: so a row whose version reads as before is the row
# read before.
VERSION = RawSQL("xmin::text || ctid::text", ())
KEY = RawSQL("id::text", ())  # the text of a uuid, as str() writes it


class Kept:
    """Workloads read whole only where they changed since the last build. Every admission needs every active
    workload (each holds capacity) and its slice of the pending ones (10,000 waiting: 10,000 rows), a burst leaves
    thousands queued on their fabrics, and most are as the last admission read them: a build reads each one's id
    and version (two short columns), then whole only the rows it has not seen in that version, and keeps what it
    made of each (its Entry) for the next. One Kept per kind of rows read (KEPT: the active ones; PENDING: the
    pending candidates).

    Only on PostgreSQL (rows have versions there); elsewhere each build reads every row whole."""

    def __init__(self) -> None:
        # the last build's fabric kinds and its rows by id (version, entry), replaced together (one assignment)
        self._last: tuple[dict[str, tuple[int, ...]], dict[str, tuple[str, Entry]]] = ({}, {})

    def active(self, kinds: dict[str, tuple[int, ...]]) -> list[Entry]:
        return self.read(kinds, "active", _active, _active)

    def read(
        self,
        kinds: dict[str, tuple[int, ...]],
        name: Hashable,
        listed: Callable[[], QuerySet[Workload]],
        whole: Callable[[], QuerySet[Workload]],
    ) -> list[Entry]:
        """The rows `listed` gives (ROWS compiles its statements under `name`), each whole from the last build
        where its version is the one that build read, else read by id from `whole` (the rows that may be listed,
        without what picks them: a slice's window would count again among the ids alone)."""
        if connection.vendor != "postgresql":
            return [entry_of(v, kinds) for v in ROWS.rows(name, lambda: listed().values_list(*FIELDS))]
        last_kinds, last = self._last
        if kinds != last_kinds:  # a fabric's kind changes what native work may run on: every Job anew
            last = {}
        versions = ROWS.rows(
            (name, "versions"),
            lambda: listed().annotate(key=KEY, version=VERSION).values_list("key", "version"),
        )
        changed = [key for key, version in versions if last.get(key, ("",))[0] != version]
        fresh = read_whole(changed, kinds, whole)
        now: dict[str, tuple[str, Entry]] = {}
        for key, version in versions:
            if key in fresh:
                now[key] = fresh[key]
            elif key in last and last[key][0] == version:
                now[key] = last[key]
            # else it changed, or stopped being listed, between the two reads: the next build reads it
        self._last = (kinds, now)
        return [entry for _, entry in now.values()]


def read_whole(
    keys: list[str], kinds: dict[str, tuple[int, ...]], whole: Callable[[], QuerySet[Workload]] | None = None
) -> dict[str, tuple[str, Entry]]:
    """These workloads whole (those `whole` still gives: the active ones unless said), each with its version: one
    query."""
    if not keys:
        return {}
    rows = (whole or _active)().filter(pk__in=keys).annotate(version=VERSION).values_list(*FIELDS, "version")
    return {str(v[0]): (v[-1], entry_of(v[:-1], kinds)) for v in rows}


def _active() -> QuerySet[Workload]:
    return Workload.objects.filter(state__in=ACTIVE)


# The snapshot's model rows, compiled once (portal.sql) like its ROWS.
_FABRICS, _QUEUES, _QUOTAS = Compiled(Fabric), Compiled(Queue), Compiled(Quota)

View = dict[str, Any]  # what one build reads of what IT configures, by name (see Settled)


class Settled:
    """What IT configures, as the last admission read it: the enabled fabrics, the queues and their targets, the
    quotas, the agents' caps, the teams and departments, the tiers. A build reads them again only when the
    generation that every write of those tables moves (portal.workloads.context) has moved since the last read;
    else it reads that one number instead of seven statements. Only the rows are kept: what changes with the
    clock alone (a capacity report's age, an agent's expiry) is worked out from them at each build, and
    temporary grants, which start and end without a write, are read at each build. Elsewhere (SQLite) every
    build reads everything."""

    def __init__(self) -> None:
        self._kept: tuple[int | None, View] = (None, {})  # replaced whole: a build sees one generation's rows

    def view(self) -> View | None:
        """The rows kept under the current generation (filled by _read), or None where there is none (SQLite)."""
        generation = context.read_generation()
        if generation is None:
            return None
        kept_under, kept = self._kept
        if kept_under != generation:
            kept = {}
            self._kept = (generation, kept)
        return kept

    def forget(self) -> None:
        self._kept = (None, {})


SETTLED = Settled()


def _read(view: View | None, name: str, fetch: Callable[[], Any]) -> Any:
    """fetch(), or what it gave under the view's generation already."""
    if view is None:
        return fetch()
    if name not in view:
        view[name] = fetch()
    return view[name]


# What the worker observes of a fabric (capacity, health): its writes move no generation (migration workloads 0016).
OBSERVED = (
    "healthy",
    "health_detail",
    "observed_gpus_milli",
    "observed_cpus_milli",
    "observed_memory_mib",
    "observed_at",
    "observed_detail",
)


def _fabrics(view: View | None) -> list[Fabric]:
    """The enabled fabrics: the rows kept under the view's generation, with what was observed of them read afresh
    (one statement) where they were kept, since an observation moves no generation."""
    kept = view is not None and "fabrics" in view
    rows: list[Fabric] = _read(
        view, "fabrics", lambda: _FABRICS.run("enabled", lambda: Fabric.objects.filter(enabled=True))
    )
    if kept:
        observed = {
            pk: values
            for pk, *values in Fabric.objects.filter(pk__in=[f.pk for f in rows]).values_list("pk", *OBSERVED)
        }
        for f in rows:
            for name, value in zip(OBSERVED, observed.get(f.pk, ()), strict=False):
                setattr(f, name, value)
    return rows


KEPT = Kept()  # the worker's: one admission at a time (the scheduling-cycle lock), and a miss costs only time
PENDING = Kept()  # the same, for the pending candidates


def pending_candidates(kinds: dict[str, tuple[int, ...]], limit: int | None = None) -> list[Entry]:
    """The pending work a cycle considers: in each team's queue and priority tier, the oldest `limit`
    (GRIDLANE_CANDIDATES_PER_QUEUE unless given). Within one of those, fair share orders mostly by age (size moves it a
    little), so the rest wait their turn in the slice; their reason and estimate are refreshed when they
    come into it. Read whole only where changed since the last build (PENDING)."""
    limit = settings.GRIDLANE_CANDIDATES_PER_QUEUE if limit is None else limit
    return PENDING.read(kinds, ("pending candidates", limit), lambda: _candidates(limit), _waiting)


def _waiting() -> QuerySet[Workload]:
    """Pending work that may be a candidate. An array's parent is never scheduled: its elements are. Work a cycle
    told that its budget is spent waits outside the slice until the budget step gives it back
    (portal.budgets.holds)."""
    return Workload.objects.filter(state=State.PENDING, array_size=0).exclude(pending_reason_code=reasons.BUDGET_SPENT)


def _candidates(limit: int) -> QuerySet[Workload]:
    """The oldest `limit` of _waiting in each team's queue and tier, built only when first compiled."""
    return (
        _waiting()
        .annotate(
            place=Window(
                RowNumber(),
                partition_by=[F("group_id"), F("queue_id"), F("priority")],
                order_by=F("submitted_at").asc(),
            )
        )
        .filter(place__lte=limit)
    )


def weights() -> model.Weights:
    return model.Weights(**settings.GRIDLANE_PRIORITY_WEIGHTS)


def build(now: datetime, candidates: int | None = None) -> tuple[model.Snapshot, dict[str, Row]]:
    """The snapshot, and the pending and holding workloads it was built from, by id (for applying decisions).
    `candidates`: the slice of each team's queue and tier it considers (see pending_candidates)."""
    view = SETTLED.view()
    # Each fabric as it is now: what IT declared, lowered to what it last reported (capacity.planned).
    rows = _fabrics(view)
    fabrics = {f.pk: fabric_state(f, now) for f in rows}
    kinds: dict[str, tuple[int, ...]] = {}
    for f in rows:
        kinds[f.kind] = (*kinds.get(f.kind, ()), f.pk)
    queues = queue_states(fabrics, view)
    quotas = with_grants(quota_states(fabrics, view), active_grants(now, fabrics))
    read = KEPT.active(kinds) + pending_candidates(kinds, candidates)
    by_id = {key: row for key, row, _ in read}
    half_life_s = settings.GRIDLANE_FAIR_SHARE_HALF_LIFE_HOURS * 3600
    usage = {
        group_id: average_gpus(gpu_seconds, updated_at, now, half_life_s)
        for group_id, gpu_seconds, updated_at in ROWS.rows(
            "usage", lambda: GroupUsage.objects.values_list("group_id", "decayed_gpu_seconds", "updated_at")
        )
    }
    caps = agent_caps(now, view)
    tree = group_tree(view)
    snapshot = model.Snapshot(
        now=now,
        fabrics=fabrics,
        queues=queues,
        quotas=quotas,
        pending=tuple(job for _, row, job in read if row.state == State.PENDING and row.queue_id in queues),
        running=tuple(job for _, row, job in read if row.state != State.PENDING),
        usage=usage,
        shares=shares(quotas, fabrics, tree),
        owner_limits=caps.limits,
        owner_reservations=caps.reservations,
        agents=caps.agents,
        member_limits=tree.member_limits,
        parents=tree.parents,
        weights=weights(),
        tiers=tier_states(view),
        expected_runtimes=calibration.LEARNED.at(now),
        held=budget_holds(view),
    )
    rooms = live.rooms(snapshot, live_since(now))  # what fabrics have free now, where they said so lately
    if rooms:
        snapshot = replace(snapshot, live=rooms)
    return snapshot, by_id


def fabric_state(f: Fabric, now: datetime) -> model.FabricState:
    """The fabric as a cycle plans it: IT's declaration, lowered to what it last reported (capacity.planned)."""
    return model.FabricState(f.pk, f.name, planned(f, now), f.healthy, f.gpu_sharing, size=f.capacity)


def declared_free(rows: list[Fabric], now: datetime) -> tuple[dict[int, model.FabricState], dict[int, Amount]]:
    """What a cycle would find free on these fabrics now, by their planned capacity alone: each one's
    FabricState, and its capacity less what Gridlane's own work holding capacity there needs (the Ledger's
    `free`, the same sum a cycle starts from). One query. For a fabric that keeps no queue of its own (the local
    fabric, agents, burst pools) this is the truth: Gridlane is its only user."""
    fabrics = {f.pk: fabric_state(f, now) for f in rows}
    if not fabrics:
        return {}, {}
    holding = _active().filter(fabric_id__in=list(fabrics)).values_list(*FIELDS)
    snap = model.Snapshot(now=now, fabrics=fabrics, queues={}, running=tuple(job_of(v) for v in holding))
    ledger = Ledger(snap)
    return fabrics, {fid: ledger.free(fid) for fid in fabrics}


def queue_states(fabrics: Mapping[int, model.FabricState], view: View | None = None) -> dict[int, model.QueueState]:
    """Every queue with its targets among these fabrics, in order (two queries, or none under a view that has
    them)."""
    targets: dict[int, list[int]] = {}
    rows = _read(
        view,
        "queue targets",
        lambda: ROWS.rows(
            "queue targets",  # each queue's in their order; grouped by the queue's id, not by its name (a join)
            lambda: QueueTarget.objects.order_by("queue_id", "order", "pk").values_list("queue", "fabric"),
        ),
    )
    for queue_id, fabric_id in rows:
        if fabric_id in fabrics:
            targets.setdefault(queue_id, []).append(fabric_id)
    return {
        q.pk: model.QueueState(
            q.pk,
            q.slug,
            tuple(targets.get(q.pk, ())),
            q.preemptible,
            idle_preemptible=q.gpu_idle_action == Queue.GpuIdleAction.PREEMPTIBLE,
            gpu_share=q.gpu_share_percent,
        )
        for q in _read(view, "queues", lambda: _QUEUES.run("all", Queue.objects.all))
    }


def quota_states(
    fabrics: Mapping[int, model.FabricState], view: View | None = None
) -> dict[tuple[int, int | None], model.Quota]:
    """Every team's quota on these fabrics, and its team-wide one (one query, or none under a view that has it)."""
    quotas = _read(view, "quotas", lambda: _QUOTAS.run("all", lambda: Quota.objects.order_by()))  # any order
    return {
        (q.group_id, q.fabric_id): model.Quota(
            q.group_id,
            q.fabric_id,
            reservation=q.reservation,
            limit=Resources(_limit(q.gpu_limit_milli), _limit(q.cpu_limit_milli), _limit(q.memory_limit_mib)),
        )
        for q in quotas  # (in any order: Quota's own would join its team and fabric to sort by their names)
        if q.fabric_id is None or q.fabric_id in fabrics
    }


class AgentCaps(NamedTuple):
    limits: dict[int, int]  # service identity -> its own GPU cap inside its team's (milli)
    reservations: dict[int, int]  # active service identity -> the GPUs owed it out of its team's reservation
    agents: frozenset[int]  # every service identity (a member cap is for people)


def agent_caps(now: datetime, view: View | None = None) -> AgentCaps:
    """The agent identities' caps and reservations (one query, or none under a view that has it)."""
    rows = _read(
        view,
        "agent caps",
        lambda: ROWS.rows(
            "agent caps",
            lambda: ServiceIdentity.objects.values_list(
                "user_id", "gpu_limit_milli", "gpu_reservation_milli", "disabled_at", "expires_at"
            ),
        ),
    )
    agents = [
        (user_id, limit, reserved, disabled is None and expires > now)
        for user_id, limit, reserved, disabled, expires in rows
    ]
    return AgentCaps(
        limits={user_id: limit for user_id, limit, _, _ in agents if limit is not None},
        reservations={user_id: reserved for user_id, _, reserved, active in agents if reserved and active},
        agents=frozenset(user_id for user_id, _, _, _ in agents),
    )


class GroupTree(NamedTuple):
    parents: dict[int, int]  # team -> its department
    member_limits: dict[int, int]  # team -> the GPUs one person may hold in it (milli), where it sets a cap
    weights: dict[int, int]  # every group's fair-share weight


def group_tree(view: View | None = None) -> GroupTree:
    """Teams and departments: who is below whom, member caps and fair-share weights (one query, or none under a
    view that has it)."""
    rows = _read(
        view,
        "group tree",
        lambda: ROWS.rows(
            "group tree",
            lambda: ResourceGroup.objects.values_list("pk", "parent_id", "member_gpu_limit_milli", "fair_share_weight"),
        ),
    )
    return GroupTree(
        parents={pk: parent for pk, parent, _, _ in rows if parent is not None},
        member_limits={pk: cap for pk, _, cap, _ in rows if cap is not None},
        weights={pk: weight for pk, _, _, weight in rows},
    )


def active_grants(now: datetime, fabrics: Mapping[int, model.FabricState]) -> dict[tuple[int, int], int]:
    """Milli-GPUs granted on top of each (team, fabric)'s quota now: approved grants whose window holds `now`
    (one query). A grant ends here, on its own, the first cycle after its end."""
    rows = (
        QuotaGrant.objects.filter(state=QuotaGrant.State.APPROVED, starts_at__lte=now, ends_at__gt=now)
        .order_by()
        .values("team_id", "fabric_id")
        .annotate(extra=Sum("gpus_milli"))
        .values_list("team_id", "fabric_id", "extra")
    )
    return {(team, fabric): extra for team, fabric, extra in rows if fabric in fabrics}


def with_grants(
    quotas: dict[tuple[int, int | None], model.Quota], grants: Mapping[tuple[int, int], int]
) -> dict[tuple[int, int | None], model.Quota]:
    """The quotas with temporary grants added: each raises its team's GPU reservation and limit on its fabric (a
    team with no quota there gets the grant as its reservation, still with no cap), and a team-wide cap by as
    much, so that the cap does not swallow it."""
    out = dict(quotas)
    extra_gpus: dict[int, int] = {}
    for (team, fabric), extra in grants.items():
        more = Resources(gpus_milli=extra)
        quota = out.get((team, fabric)) or model.Quota(team, fabric)
        out[(team, fabric)] = replace(quota, reservation=quota.reservation + more, limit=_raised(quota.limit, extra))
        extra_gpus[team] = extra_gpus.get(team, 0) + extra
    for team, extra in extra_gpus.items():
        overall = out.get((team, None))
        if overall is not None:
            out[(team, None)] = replace(overall, limit=_raised(overall.limit, extra))
    return out


def _raised(limit: Resources, extra: int) -> Resources:
    if limit.gpus_milli >= model.UNLIMITED:
        return limit
    return replace(limit, gpus_milli=limit.gpus_milli + extra)


def budget_holds(view: View | None = None) -> dict[tuple[int, int], reasons.Reason]:
    """The work spent budgets hold, as the scheduler keys it (model.Snapshot.held): a team's budget holds the
    team's work, a member's her work in the team, an agent identity's its work anywhere (one query, or none under
    a view that has it: a change of a hold moves the generation, migration budgets 0002)."""
    rows = _read(
        view,
        "budget holds",
        lambda: ROWS.rows(
            "budget holds",
            lambda: Budget.objects.exclude(held_reason="").values_list("scope", "team_id", "user_id", "held_reason"),
        ),
    )
    held: dict[tuple[int, int], reasons.Reason] = {}
    for scope, team_id, user_id, words in rows:
        key = (
            (team_id, 0)
            if scope == Budget.Scope.TEAM
            else (0, user_id)
            if scope == Budget.Scope.AGENT
            else (team_id, user_id)
        )
        held[key] = reasons.budget_spent(words)
    return held


def tier_states(view: View | None = None) -> dict[str, model.TierState]:
    """IT's priority tiers as the scheduler sees them (one query, or none under a view that has it): a higher
    weight is a higher rank, and tiers of equal weight share one (neither preempts the other)."""
    rows = _read(
        view,
        "tiers",
        lambda: ROWS.rows("tiers", lambda: PriorityTier.objects.values_list("slug", "weight", "may_preempt")),
    )
    ranks = {w: i for i, w in enumerate(sorted({w for _, w, _ in rows}))}
    return {slug: model.TierState(weight, may_preempt, ranks[weight]) for slug, weight, may_preempt in rows}


def shares(
    quotas: Mapping[tuple[int, int | None], model.Quota], fabrics: Mapping[int, model.FabricState], tree: GroupTree
) -> dict[int, float]:
    """Each team's allocation in GPUs (the L of fair share): scheduler.priority.allocations over every team's
    fair-share weight (a department's reservation is its teams', and it runs nothing of its own)."""
    return allocations(quotas, fabrics, tree.weights, departments=frozenset(tree.parents.values()))
