"""decide() makes exactly the decisions of the slow, readable reference (reference.py) over random snapshots:
the same admissions, preemptions, and waiting work with the same reasons, places and estimated starts."""

from __future__ import annotations

import os
from datetime import timedelta

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fabrics.base import Resources
from scheduler import FabricState, Job, QueueState, Quota, Snapshot, decide
from scheduler.model import UNLIMITED, TierState
from scheduler.reasons import Reason, budget_spent
from tests.scheduler import reference
from tests.scheduler.shapes import NOW

TEAMS = (1, 2, 3, 4)
DEPARTMENTS = (10, 11)
OWNERS = (101, 102, 103)
TIERS = ("low", "normal", "high", "urgent")
# GRIDLANE_HYPOTHESIS_EXAMPLES=2000 for a deeper search than the suite's default.
SETTINGS = settings(
    max_examples=int(os.environ.get("GRIDLANE_HYPOTHESIS_EXAMPLES", "200")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

milli_gpus = st.sampled_from([0, 250, 500, 1000, 1000, 2000, 3000, 4000])


@st.composite
def fabrics(draw: st.DrawFn) -> dict[int, FabricState]:
    out = {}
    for fid in range(1, draw(st.integers(1, 3)) + 1):
        gpus = draw(st.integers(0, 12)) * 1000
        capacity = Resources(gpus, draw(st.sampled_from([8_000, 64_000])), draw(st.sampled_from([16_384, 524_288])))
        declared = draw(st.sampled_from([None, None, Resources(gpus + 4000, capacity.cpus_milli, capacity.memory_mib)]))
        out[fid] = FabricState(
            fid,
            f"f{fid}",
            capacity,
            healthy=draw(st.sampled_from([True, True, True, False])),
            gpu_sharing=draw(st.booleans()),
            size=declared,
            max_nodes=draw(st.sampled_from([None, None, 1, 2])),
        )
    return out


@st.composite
def quotas(draw: st.DrawFn, groups: tuple[int, ...], fids: list[int]) -> dict[tuple[int, int | None], Quota]:
    out: dict[tuple[int, int | None], Quota] = {}
    for g in groups:
        for fid in [*fids, None]:
            if not draw(st.booleans()) or (fid is None and draw(st.booleans())):
                continue
            reserved = Resources(
                draw(st.integers(0, 6)) * 1000 if fid is not None else 0,
                draw(st.sampled_from([0, 0, 4000])),
                draw(st.sampled_from([0, 0, 8192])),
            )
            limited = draw(st.integers(0, 3)) == 0
            limit_gpus = draw(st.integers(0, 10)) * 1000 if limited else UNLIMITED
            limit_cpus = draw(st.sampled_from([UNLIMITED, UNLIMITED, 6000]))
            out[g, fid] = Quota(g, fid, reserved, Resources(limit_gpus, limit_cpus, UNLIMITED))
    return out


@st.composite
def snapshots(draw: st.DrawFn, busy: bool = False) -> Snapshot:
    """Any snapshot; `busy`: fabrics full of preemptible work, in departments, under tiers of which the highest
    may preempt (where preemption of every kind happens)."""
    fabs = draw(fabrics())
    fids = list(fabs)
    caps = draw(st.booleans())  # a member's cap, a queue's share, an identity's limit and reservation
    queues = {}
    for qid in (1, 2, 3):
        targets = draw(st.lists(st.sampled_from(fids), min_size=0 if qid == 3 else 1, max_size=3, unique=True))
        queues[qid] = QueueState(
            qid,
            f"q{qid}",
            tuple(targets),
            preemptible=busy or draw(st.booleans()),
            idle_preemptible=draw(st.booleans()),
            gpu_share=draw(st.sampled_from([None, None, 25, 50])) if caps else None,
        )
    parents = draw(st.sampled_from([{}, {1: 10, 2: 10}, {1: 10, 2: 10, 3: 11}, {1: 10, 2: 10, 3: 11, 11: 10}][busy:]))
    groups = TEAMS + tuple(sorted(set(parents.values())))
    weights = {name: draw(st.integers(-2, 6)) for name in TIERS}
    ranked = sorted(set(weights.values()))
    tiered = busy or draw(st.booleans())
    tiers = (
        {n: TierState(w, may_preempt=draw(st.booleans()), rank=ranked.index(w)) for n, w in weights.items()}
        | ({"urgent": TierState(draw(st.integers(-2, 7)), may_preempt=True, rank=len(ranked))} if busy else {})
        if tiered
        else {}
    )
    arrays = ("", "", "", "a1", "a2") if draw(st.booleans()) else ("",)

    def job(i: int, fid: int | None) -> Job:
        queue = draw(st.sampled_from([1, 1, 1, 2, 2, 3, 4]))  # 3: perhaps no targets; 4: a queue that is gone
        array = draw(st.sampled_from(arrays))
        return Job(
            f"{'r' if fid else 'p'}{i}",
            draw(st.sampled_from(TEAMS)),
            queue if fid is None else draw(st.sampled_from([1, 2])),
            Resources(draw(milli_gpus), draw(st.sampled_from([0, 1000, 4000])), draw(st.sampled_from([0, 1024]))),
            nodes=draw(st.sampled_from([1, 1, 1, 2, 3])),
            priority=draw(st.sampled_from(TIERS if tiered else TIERS[:3])),
            submitted_at=NOW - timedelta(seconds=draw(st.integers(0, 5000))),
            runtime_limit_s=draw(st.sampled_from([60, 600, 3600, 7200])),
            fabric_id=fid,
            started_at=NOW - timedelta(seconds=draw(st.integers(0, 7200))) if fid else None,
            owner_id=draw(st.sampled_from(OWNERS)),
            only_on=draw(st.sampled_from([None, None, (fids[0],)])),
            array_id=array,
            array_throttle=draw(st.sampled_from([0, 1, 2])) if array else 0,
            gpus_idle=fid is not None and draw(st.booleans()),
        )

    running = tuple(job(i, draw(st.sampled_from(fids))) for i in range(draw(st.integers(4 if busy else 0, 14))))
    pending = tuple(job(i, None) for i in range(draw(st.integers(0, 24))))
    return Snapshot(
        NOW,
        fabs,
        queues,
        pending,
        running,
        draw(quotas(groups, fids)),
        usage={g: draw(st.floats(0, 8)) for g in TEAMS},
        shares={g: draw(st.floats(0.5, 8)) for g in TEAMS if draw(st.booleans())},
        owner_limits={o: draw(st.integers(0, 6)) * 1000 for o in OWNERS if caps and draw(st.booleans())},
        owner_reservations={o: draw(st.integers(1, 4)) * 1000 for o in OWNERS if caps and draw(st.booleans())},
        member_limits={g: draw(st.integers(1, 8)) * 500 for g in TEAMS if caps and draw(st.booleans())},
        agents=frozenset(o for o in OWNERS if draw(st.booleans())),
        parents=parents,
        tiers=tiers,
        held=draw(holds()),
    )


@st.composite
def holds(draw: st.DrawFn) -> dict[tuple[int, int], Reason]:
    """Spent budgets, now and then: a team's, a member's in a team, an identity's anywhere."""
    if not draw(st.booleans()):
        return {}
    scopes = [(t, 0) for t in TEAMS] + [(t, o) for t in TEAMS for o in OWNERS] + [(0, o) for o in OWNERS]
    chosen = draw(st.lists(st.sampled_from(scopes), max_size=3, unique=True))
    return {scope: budget_spent(f"held: the budget of {scope} is spent") for scope in chosen}


@SETTINGS
@given(snapshots())
def test_decide_makes_the_decisions_of_the_reference(s: Snapshot) -> None:
    assert decide(s) == reference.decide(s)


@SETTINGS
@given(snapshots(busy=True))
def test_decide_makes_the_decisions_of_the_reference_where_work_is_preempted(s: Snapshot) -> None:
    assert decide(s) == reference.decide(s)
