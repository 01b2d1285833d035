"""Properties of decide() over random snapshots (hypothesis): what must hold whatever the line looks like."""

from __future__ import annotations

import os
import random
from dataclasses import replace
from datetime import timedelta

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fabrics.base import Resources
from scheduler import FabricState, Job, QueueState, Quota, Snapshot, decide
from scheduler.ledger import need_on
from scheduler.model import UNLIMITED, TierState
from scheduler.reasons import BEHIND_HIGHER_PRIORITY, NO_CAPACITY
from tests.scheduler.shapes import NOW

GROUPS = (1, 2, 3)
TIER_NAMES = ("low", "normal", "high", "urgent")
DEPARTMENT = 10  # groups 1 and 2, where a test asks for departments
OWNERS = (101, 102, 103)
# GRIDLANE_HYPOTHESIS_EXAMPLES=2000 for a deeper search than the suite's default.
SETTINGS = settings(
    max_examples=int(os.environ.get("GRIDLANE_HYPOTHESIS_EXAMPLES", "150")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)


@st.composite
def snapshots(
    draw,
    *,
    reservations: bool = True,
    preemptible: bool | None = None,
    caps: bool = False,
    departments: bool = False,
    tiered: bool = False,
) -> Snapshot:
    n_fabrics = draw(st.integers(1, 2))
    fabrics = {
        fid: FabricState(
            fid,
            f"f{fid}",
            Resources(draw(st.integers(2, 16)) * 1000, 64_000, 512 * 1024),
            gpu_sharing=draw(st.booleans()),
        )
        for fid in range(1, n_fabrics + 1)
    }
    share = st.one_of(st.none(), st.integers(1, 100)) if caps else st.none()
    queues = {
        1: QueueState(1, "a", (1,), draw(st.booleans()) if preemptible is None else preemptible, gpu_share=draw(share)),
        2: QueueState(
            2, "b", tuple(fabrics), draw(st.booleans()) if preemptible is None else preemptible, gpu_share=draw(share)
        ),
    }
    quotas: dict[tuple[int, int | None], Quota] = {}
    for fid, f in fabrics.items():
        left = f.capacity.gpus_milli
        for g in GROUPS:
            reserved = draw(st.integers(0, left // 1000)) * 1000 if reservations else 0
            left -= reserved
            limit = draw(st.one_of(st.none(), st.integers(reserved // 1000, 20).map(lambda n: n * 1000)))
            quotas[g, fid] = Quota(
                g,
                fid,
                Resources(reserved, 0, 0),
                Resources(UNLIMITED if limit is None else limit, UNLIMITED, UNLIMITED),
            )
        if departments:  # groups 1 and 2 in DEPARTMENT: its reservation theirs and perhaps more, its own limit
            reserved = sum(quotas[g, fid].reservation.gpus_milli for g in (1, 2))
            reserved += draw(st.integers(0, left // 1000)) * 1000
            limit = draw(st.one_of(st.none(), st.integers(reserved // 1000, 24).map(lambda n: n * 1000)))
            quotas[DEPARTMENT, fid] = Quota(
                DEPARTMENT,
                fid,
                Resources(reserved, 0, 0),
                Resources(UNLIMITED if limit is None else limit, UNLIMITED, UNLIMITED),
            )
    parents = {1: DEPARTMENT, 2: DEPARTMENT} if departments else {}

    # IT's tiers: the three old ones reweighed, and one more that may (or may not) preempt; ranks by weight.
    tiers: dict[str, TierState] = {}
    if tiered:
        weights = {name: draw(st.integers(-2, 6)) for name in TIER_NAMES}
        ranked = sorted(set(weights.values()))
        tiers = {
            name: TierState(w, may_preempt=name == "urgent" and draw(st.booleans()), rank=ranked.index(w))
            for name, w in weights.items()
        }
    priorities = TIER_NAMES if tiered else TIER_NAMES[:3]

    def job(i: int, running_on: int | None) -> Job:
        nodes = draw(st.sampled_from([1, 1, 1, 2]))
        gpus = draw(st.sampled_from([250, 500, 1000, 1000, 2000, 4000]))
        return Job(
            f"{'r' if running_on else 'p'}{i}",
            draw(st.sampled_from(GROUPS)),
            1 if running_on else draw(st.sampled_from([1, 2])),
            Resources(gpus, 1000, 1024),
            nodes=nodes,
            priority=draw(st.sampled_from(priorities)),
            submitted_at=NOW - timedelta(seconds=draw(st.integers(0, 10_000))),
            runtime_limit_s=draw(st.sampled_from([300, 3600, 7200])),
            fabric_id=running_on,
            started_at=NOW - timedelta(seconds=draw(st.integers(0, 7200))) if running_on else None,
            owner_id=draw(st.sampled_from(OWNERS)) if caps else 0,
        )

    running: list[Job] = []
    used = dict.fromkeys(fabrics, 0)
    group_used: dict[tuple[int, int], int] = {}
    for i in range(draw(st.integers(0, 12))):
        candidate = job(i, 1)
        need = need_on(candidate, fabrics[1].gpu_sharing)[0]
        keys = [(candidate.group_id, 1)] + ([(parents[candidate.group_id], 1)] if candidate.group_id in parents else [])
        if used[1] + need <= fabrics[1].capacity.gpus_milli and all(
            group_used.get(key, 0) + need <= quotas[key].limit.gpus_milli for key in keys
        ):
            running.append(candidate)
            used[1] += need
            for key in keys:
                group_used[key] = group_used.get(key, 0) + need
    pending = [job(i, None) for i in range(draw(st.integers(0, 25)))]
    if departments:
        return Snapshot(NOW, fabrics, queues, tuple(pending), tuple(running), quotas, parents=parents)
    if not caps:
        return Snapshot(NOW, fabrics, queues, tuple(pending), tuple(running), quotas, tiers=tiers)
    member_limits = {g: draw(st.integers(1, 8)) * 500 for g in GROUPS if draw(st.booleans())}
    agents = frozenset(o for o in OWNERS if draw(st.booleans()))
    return Snapshot(
        NOW,
        fabrics,
        queues,
        tuple(pending),
        tuple(running),
        quotas,
        member_limits=member_limits,
        agents=agents,
        tiers=tiers,
    )


def usage_after(s: Snapshot) -> tuple[dict[int, int], dict[tuple[int, int], int]]:
    d = decide(s)
    gone = {p.job_id for p in d.preempt}
    by_id = {j.id: j for j in s.pending}
    used: dict[int, int] = dict.fromkeys(s.fabrics, 0)
    group: dict[tuple[int, int], int] = {}
    placed = [(j, j.fabric_id or 0) for j in s.running if j.id not in gone]
    placed += [(by_id[a.job_id], a.fabric_id) for a in d.admit]
    for job, fid in placed:
        need = need_on(job, s.fabrics[fid].gpu_sharing)[0]
        used[fid] += need
        group[job.group_id, fid] = group.get((job.group_id, fid), 0) + need
    return used, group


@SETTINGS
@given(snapshots())
def test_never_above_capacity(s: Snapshot) -> None:
    used, _ = usage_after(s)
    for fid, fabric in s.fabrics.items():
        assert used[fid] <= fabric.capacity.gpus_milli


@SETTINGS
@given(snapshots())
def test_never_above_a_limit(s: Snapshot) -> None:
    _, group = usage_after(s)
    for (g, fid), used in group.items():
        assert used <= s.quotas[g, fid].limit.gpus_milli


@SETTINGS
@given(snapshots(caps=True))
def test_no_admission_takes_a_member_or_a_queue_past_its_cap(s: Snapshot) -> None:
    """Work already running may sit above a cap (it was set later); nothing is admitted that ends above one."""
    d = decide(s)
    gone = {p.job_id for p in d.preempt}
    by_id = {j.id: j for j in s.pending}
    placed = [(j, j.fabric_id or 0) for j in s.running if j.id not in gone]
    placed += [(by_id[a.job_id], a.fabric_id) for a in d.admit]
    member: dict[tuple[int, int], int] = {}
    queue: dict[tuple[int, int], int] = {}
    for job, fid in placed:
        need = need_on(job, s.fabrics[fid].gpu_sharing)[0]
        member[job.group_id, job.owner_id] = member.get((job.group_id, job.owner_id), 0) + need
        queue[job.queue_id, fid] = queue.get((job.queue_id, fid), 0) + need
    for a in d.admit:
        job = by_id[a.job_id]
        if not job.per_node.gpus_milli:
            continue
        cap = s.member_limits.get(job.group_id)
        if cap is not None and job.owner_id not in s.agents:
            assert member[job.group_id, job.owner_id] <= cap
        share = s.queues[job.queue_id].gpu_share
        if share is not None:
            assert queue[job.queue_id, a.fabric_id] <= s.fabrics[a.fabric_id].capacity.gpus_milli * share // 100


@SETTINGS
@given(snapshots(departments=True))
def test_never_above_a_limit_at_either_level_with_departments(s: Snapshot) -> None:
    used, group = usage_after(s)
    for fid, fabric in s.fabrics.items():
        assert used[fid] <= fabric.capacity.gpus_milli
    department: dict[int, int] = {}
    for (g, fid), held in group.items():
        assert held <= s.quotas[g, fid].limit.gpus_milli
        if g in s.parents:
            department[fid] = department.get(fid, 0) + held
    for fid, held in department.items():
        assert held <= s.quotas[DEPARTMENT, fid].limit.gpus_milli


@SETTINGS
@given(snapshots(preemptible=True, departments=True))
def test_a_reservation_is_honoured_within_one_cycle_in_a_department_too(s: Snapshot) -> None:
    reservations_honoured(s)


@SETTINGS
@given(snapshots(caps=True))
def test_never_above_capacity_or_a_limit_with_caps(s: Snapshot) -> None:
    used, group = usage_after(s)
    for fid, fabric in s.fabrics.items():
        assert used[fid] <= fabric.capacity.gpus_milli
    for (g, fid), held in group.items():
        assert held <= s.quotas[g, fid].limit.gpus_milli


@SETTINGS
@given(snapshots())
def test_every_job_is_decided_once_and_a_gang_is_never_split(s: Snapshot) -> None:
    d = decide(s)
    admitted = [a.job_id for a in d.admit]
    waiting = [w.job_id for w in d.waiting]
    assert len(admitted) == len(set(admitted))  # one Admit per job, on one fabric: a gang goes whole or not at all
    assert sorted(admitted + waiting) == sorted(j.id for j in s.pending)
    assert {p.job_id for p in d.preempt} <= {j.id for j in s.running}


@SETTINGS
@given(snapshots(), st.randoms(use_true_random=False))
def test_decide_is_deterministic_whatever_the_input_order(s: Snapshot, rnd: random.Random) -> None:
    shuffled = list(s.pending)
    rnd.shuffle(shuffled)
    assert decide(s) == decide(s) == decide(replace(s, pending=tuple(shuffled)))


@SETTINGS
@given(snapshots(reservations=False, preemptible=False))
def test_backfill_never_delays_the_head(s: Snapshot) -> None:
    """The head's estimated start is the same with the rest of the line behind it as without (where it has waited
    long enough to reserve its start, backfill.reserves)."""
    from scheduler.backfill import reserves
    from scheduler.priority import ordered

    d = decide(s)
    line = [j.id for j in ordered(s)]
    old = {j.id for j in s.pending if reserves(j, s.now)}
    heads = [
        w
        for w in sorted(d.waiting, key=lambda w: line.index(w.job_id))
        if w.reason.code in (NO_CAPACITY, "gang_does_not_fit")
    ]
    if not heads or heads[0].job_id not in old:
        return
    head = heads[0]
    alone = replace(s, pending=tuple(j for j in s.pending if line.index(j.id) <= line.index(head.job_id)))
    without_the_rest = {w.job_id: w for w in decide(alone).waiting}[head.job_id]
    assert head.estimated_start == without_the_rest.estimated_start
    assert all(w.reason.code != BEHIND_HIGHER_PRIORITY for w in decide(alone).waiting)


@SETTINGS
@given(snapshots(reservations=False, preemptible=False))
def test_backfill_never_delays_the_starts_it_reserved(s: Snapshot) -> None:
    """On one fabric, each of the first RESERVED jobs waiting for capacity keeps its estimated start whether the
    line behind it is there or not: what backfill starts now fits around every start it reserved (up to the first
    that has waited less than backfill.RESERVE_AFTER_S: that reserves none, so backfill may delay it and what
    waits behind it)."""
    from scheduler.backfill import RESERVED, reserves
    from scheduler.priority import ordered

    s = replace(s, fabrics={1: s.fabrics[1]}, queues={q.id: replace(q, fabric_ids=(1,)) for q in s.queues.values()})
    d = decide(s)
    line = [j.id for j in ordered(s)]
    old = {j.id for j in s.pending if reserves(j, s.now)}
    blocked = (NO_CAPACITY, "gang_does_not_fit", BEHIND_HIGHER_PRIORITY)
    waiting = sorted((w for w in d.waiting if w.reason.code in blocked), key=lambda w: line.index(w.job_id))
    young = next((i for i, w in enumerate(waiting) if w.job_id not in old), len(waiting))
    for w in waiting[: min(young, RESERVED)]:  # (work behind young work may wait on it, and it on backfill)
        place = line.index(w.job_id)
        alone = replace(s, pending=tuple(j for j in s.pending if line.index(j.id) <= place))
        assert {v.job_id: v for v in decide(alone).waiting}[w.job_id].estimated_start == w.estimated_start


@SETTINGS
@given(snapshots(preemptible=True))
def test_a_reservation_is_honoured_within_one_cycle_when_preemption_is_allowed(s: Snapshot) -> None:
    reservations_honoured(s)


def reservations_honoured(s: Snapshot) -> None:
    """The first job (in line order) of a team that fits within its unused reservation on a fabric is admitted."""
    from scheduler.priority import ordered

    d = decide(s)
    admitted = {a.job_id for a in d.admit}
    used: dict[tuple[int, int], int] = {}
    for j in s.running:
        key = (j.group_id, j.fabric_id or 0)
        used[key] = used.get(key, 0) + need_on(j, s.fabrics[key[1]].gpu_sharing)[0]
    seen: set[int] = set()
    for job in ordered(s):
        if job.group_id in seen:
            continue
        seen.add(job.group_id)  # only each team's first job: its later ones may find the reservation taken by it
        fid = s.queues[job.queue_id].fabric_ids[0]
        reserved = s.quotas[job.group_id, fid].reservation.gpus_milli
        need = need_on(job, s.fabrics[fid].gpu_sharing)[0]
        if need <= reserved - used.get((job.group_id, fid), 0) and need_on(job, True)[1:] <= (64_000, 512 * 1024):
            assert job.id in admitted, (s, decide(s))


# --- Priority tiers IT defines ----------------------------------------------------------------------------


@SETTINGS
@given(snapshots(tiered=True, caps=True))
def test_with_tiers_never_above_capacity_or_a_limit(s: Snapshot) -> None:
    used, group = usage_after(s)
    for fid, fabric in s.fabrics.items():
        assert used[fid] <= fabric.capacity.gpus_milli
    for (g, fid), held in group.items():
        assert held <= s.quotas[g, fid].limit.gpus_milli


@SETTINGS
@given(snapshots(tiered=True, preemptible=True))
def test_with_tiers_a_reservation_is_still_honoured_within_one_cycle(s: Snapshot) -> None:
    test_a_reservation_is_honoured_within_one_cycle_when_preemption_is_allowed.hypothesis.inner_test(s)  # type: ignore[attr-defined]


@SETTINGS
@given(st.one_of(snapshots(tiered=True, preemptible=True, reservations=False), snapshots(tiered=True)))
def test_tier_preemption_takes_only_borrowed_work_of_lower_tiers(s: Snapshot) -> None:
    """Work stopped for a tier is of a lower tier than work admitted on its fabric in the same cycle, in a
    preemptible queue, of a team that holds more than its reservation there (this cycle's admissions counted)."""
    d = decide(s)
    by_id = {j.id: j for j in (*s.pending, *s.running)}
    admitted = [(by_id[a.job_id], a.fabric_id) for a in d.admit]
    for p in d.preempt:
        if "tier" not in p.reason.message:
            continue
        victim = by_id[p.job_id]
        fid = victim.fabric_id or 0
        assert s.queues[victim.queue_id].preemptible
        takers = [j for j, f in admitted if f == fid and s.tiers[j.priority].may_preempt]
        assert any(s.tiers[j.priority].rank > s.tiers[victim.priority].rank for j in takers)
        # what the team holds there: its running work and what this cycle admitted for it (which may borrow)
        theirs = [j for j in s.running if j.group_id == victim.group_id and j.fabric_id == fid]
        theirs += [j for j, f in admitted if j.group_id == victim.group_id and f == fid]
        held = sum(need_on(j, s.fabrics[fid].gpu_sharing)[0] for j in theirs)
        assert held > s.quotas[victim.group_id, fid].reservation.gpus_milli


@SETTINGS
@given(snapshots(tiered=True), st.randoms(use_true_random=False))
def test_with_tiers_decide_is_deterministic_whatever_the_input_order(s: Snapshot, rnd: random.Random) -> None:
    shuffled = list(s.pending)
    rnd.shuffle(shuffled)
    assert decide(s) == decide(s) == decide(replace(s, pending=tuple(shuffled)))
