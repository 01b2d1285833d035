"""The peers Gridlane is measured against, each rule of their documentation as a table test named as a sentence."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta

import pytest

from scheduler import Job, QueueState
from scheduler.peers import Slurm, SlurmConfig, fairshare_factor, kueue, named, reservation_violations
from scheduler.simulate import fifo, read_trace, report, simulate
from tests.scheduler.shapes import (
    FRAUD,
    NLP,
    NOW,
    POOL,
    TRAIN,
    VISION,
    fabric,
    gpu_jobs,
    queues,
    reserve,
    running_on,
    snapshot,
)
from tests.scheduler.test_simulate import write_trace

RESEARCH = 50  # a department of vision and fraud
DAY = 86400


@dataclass
class Case:
    name: str
    gpus: float
    pending: list[Job]
    running: list[Job] = field(default_factory=list)
    quotas: list = field(default_factory=list)
    extra: dict = field(default_factory=dict)
    want_admitted: set[str] = field(default_factory=set)
    want_preempted: set[str] = field(default_factory=set)


KUEUE = [
    Case(
        "BestEffortFIFO: a workload over its ClusterQueue's quota does not block the smaller one behind it",
        gpus=8,
        pending=gpu_jobs(VISION, 1, 6, name="big") + gpu_jobs(VISION, 1, 2, name="small"),
        quotas=[reserve(VISION, POOL, 4, limit=4)],
        want_admitted={"small-0"},
    ),
    Case(
        "cohort borrowing: a ClusterQueue borrows the unused nominal quota of the others and the unreserved rest",
        gpus=8,
        pending=gpu_jobs(VISION, 7),
        quotas=[reserve(VISION, POOL, 2), reserve(FRAUD, POOL, 2)],
        want_admitted={f"vision-{i}" for i in range(7)},
    ),
    Case(
        "borrowingLimit: a ClusterQueue borrows no more than its limit above its nominal quota",
        gpus=8,
        pending=gpu_jobs(VISION, 7),
        quotas=[reserve(VISION, POOL, 2, limit=5), reserve(FRAUD, POOL, 2)],
        want_admitted={f"vision-{i}" for i in range(5)},
    ),
    Case(
        "reclaimWithinCohort: a ClusterQueue below its nominal quota preempts a borrower, the newest only",
        gpus=4,
        pending=gpu_jobs(VISION, 1),
        running=running_on(POOL, gpu_jobs(FRAUD, 4), started_s_ago=60),
        quotas=[reserve(VISION, POOL, 2), reserve(FRAUD, POOL, 2)],
        extra={"queues": queues(preemptible_train=True)},
        want_admitted={"vision-0"},
        want_preempted={"fraud-3"},
    ),
    Case(
        "reclaimWithinCohort: a ClusterQueue at its nominal quota does not preempt, it waits",
        gpus=4,
        pending=gpu_jobs(VISION, 1),
        running=running_on(POOL, gpu_jobs(VISION, 2, name="v") + gpu_jobs(FRAUD, 2)),
        quotas=[reserve(VISION, POOL, 2), reserve(FRAUD, POOL, 2)],
    ),
    Case(
        "reclaimWithinCohort: work that would need more than the nominal quota does not preempt",
        gpus=4,
        pending=gpu_jobs(VISION, 1, 3),
        running=running_on(POOL, gpu_jobs(FRAUD, 4)),
        quotas=[reserve(VISION, POOL, 2), reserve(FRAUD, POOL, 2)],
    ),
    Case(
        "departments are cohorts: a department's limit caps its teams together",
        gpus=8,
        pending=gpu_jobs(VISION, 3) + gpu_jobs(FRAUD, 3) + gpu_jobs(NLP, 1),
        quotas=[reserve(VISION, POOL, 1), reserve(FRAUD, POOL, 1), reserve(RESEARCH, POOL, 2, limit=4)],
        extra={"parents": {VISION: RESEARCH, FRAUD: RESEARCH}},
        want_admitted={"vision-0", "vision-1", "fraud-0", "fraud-1", "nlp-0"},
    ),
]


@pytest.mark.parametrize("case", KUEUE, ids=lambda c: c.name)
def test_kueue(case: Case) -> None:
    snap = snapshot([fabric(POOL, case.gpus)], case.pending, case.running, case.quotas, **case.extra)
    decisions = kueue(snap)
    assert {a.job_id for a in decisions.admit} == case.want_admitted
    assert {p.job_id for p in decisions.preempt} == case.want_preempted
    assert len(decisions.waiting) == len(case.pending) - len(case.want_admitted)


SLURM = [
    Case(
        "backfill: a short job starts beside the top job's reservation, it ends before the top job could start",
        gpus=4,
        pending=gpu_jobs(VISION, 1, 4, name="top", age_s=3600) + gpu_jobs(FRAUD, 1, 2, name="short", runtime_s=1800),
        running=running_on(POOL, gpu_jobs(NLP, 1, 2, runtime_s=3600)),
        want_admitted={"short-0"},
    ),
    Case(
        "backfill does not delay the top job: a long job that would run past the top job's start waits",
        gpus=4,
        pending=gpu_jobs(VISION, 1, 4, name="top", age_s=3600) + gpu_jobs(FRAUD, 1, 2, name="long", runtime_s=7200),
        running=running_on(POOL, gpu_jobs(NLP, 1, 2, runtime_s=3600)),
    ),
    Case(
        "a long job starts in what the top job leaves free at its start",
        gpus=8,
        pending=gpu_jobs(VISION, 1, 6, name="top", age_s=3600) + gpu_jobs(FRAUD, 1, 2, name="long", runtime_s=7200),
        running=running_on(POOL, gpu_jobs(NLP, 1, 4, runtime_s=3600)),
        want_admitted={"long-0"},
    ),
    Case(
        "no preemption: a team below its reservation waits for borrowed capacity to end (preempt/none)",
        gpus=4,
        pending=gpu_jobs(VISION, 1),
        running=running_on(POOL, gpu_jobs(FRAUD, 4)),
        quotas=[reserve(VISION, POOL, 2), reserve(FRAUD, POOL, 2)],
        extra={"queues": queues(preemptible_train=True)},
    ),
    Case(
        "GrpTRES: a team at its limit waits, and the team behind it starts",
        gpus=8,
        pending=gpu_jobs(VISION, 1, 2, age_s=600) + gpu_jobs(FRAUD, 1, 2),
        running=running_on(POOL, gpu_jobs(VISION, 1, 2, name="v")),
        quotas=[reserve(VISION, POOL, 1, limit=3)],
        want_admitted={"fraud-0"},
    ),
]


@pytest.mark.parametrize("case", SLURM, ids=lambda c: c.name)
def test_slurm(case: Case) -> None:
    snap = snapshot([fabric(POOL, case.gpus)], case.pending, case.running, case.quotas, **case.extra)
    decisions = Slurm()(snap)
    assert {a.job_id for a in decisions.admit} == case.want_admitted
    assert not decisions.preempt


def test_slurm_fair_share_ranks_a_heavy_user_below_a_light_one_of_the_same_age_and_size() -> None:
    pending = gpu_jobs(VISION, 1, name="heavy") + gpu_jobs(FRAUD, 1, name="light")
    snap = snapshot([fabric(POOL, 8)], pending, quotas=[reserve(VISION, POOL, 2), reserve(FRAUD, POOL, 2)])
    slurm = Slurm(usage={VISION: 9000.0, FRAUD: 1000.0})
    p = slurm.priorities(snap)
    assert p["light-0"] > p["heavy-0"]
    assert p["light-0"] - p["heavy-0"] == pytest.approx(10000 * (2**-0.2 - 2**-1.8))
    assert slurm(snap).admit[0].job_id == "light-0"  # one GPU left: the light user's job goes first


def test_slurm_usage_halves_over_the_decay_half_life_so_old_use_weighs_less_than_new() -> None:
    slurm = Slurm(usage={VISION: 10_000.0}, last=NOW - timedelta(days=14), holding={FRAUD: 1000})
    snap = snapshot([fabric(POOL, 8)], gpu_jobs(VISION, 1, name="old") + gpu_jobs(FRAUD, 1, name="new"))
    slurm(snap)
    assert slurm.usage[VISION] == pytest.approx(5000.0)
    assert slurm.usage[FRAUD] == pytest.approx(14 * DAY)  # one GPU for 14 days, charged as it ran
    p = slurm.priorities(snap)
    assert p["old-0"] > p["new-0"]  # vision used less recently, fraud now outweighs it


@pytest.mark.parametrize(
    ("usage", "shares", "want"), [(0.0, 0.25, 1.0), (0.25, 0.25, 0.5), (0.5, 0.25, 0.25), (0.1, 0.0, 0.0)]
)
def test_classic_fair_share_factor_is_two_to_the_minus_usage_over_shares(usage, shares, want) -> None:
    assert fairshare_factor(usage, shares) == pytest.approx(want)


def test_slurm_weights_are_the_documented_configuration_example() -> None:
    c = SlurmConfig()
    assert (c.weight_age, c.weight_fairshare, c.weight_jobsize, c.weight_qos) == (1000, 10000, 1000, 0)
    assert c.decay_half_life_s == c.max_age_s == 14 * DAY


def test_a_violation_is_a_team_with_work_within_its_unused_reservation_left_waiting() -> None:
    # FIFO stops at fraud's 8-GPU job; vision's one GPU, within vision's reservation, waits behind it.
    pending = gpu_jobs(FRAUD, 1, 8, name="huge", age_s=60) + gpu_jobs(VISION, 1)
    one_pool = {TRAIN: QueueState(TRAIN, "train", (1,))}  # the simulator's FIFO knows one pool, fabric 1
    snap = snapshot([fabric(1, 4)], pending, quotas=[reserve(VISION, 1, 2), reserve(FRAUD, 1, 2)], queues=one_pool)
    assert reservation_violations(snap, fifo(snap)) == 1
    assert reservation_violations(snap, kueue(snap)) == 0


def test_named_gives_a_fresh_slurm_each_time_and_refuses_an_unknown_peer() -> None:
    assert named("slurm") is not named("slurm")
    assert named("kueue") is kueue
    with pytest.raises(ValueError, match="unknown peer"):
        named("pbs")


@pytest.mark.parametrize("policy", ["kueue", "slurm"])
def test_the_simulator_runs_each_peer_over_a_trace_within_capacity(tmp_path, policy) -> None:
    tasks = read_trace(str(write_trace(tmp_path / "t.csv")), groups=4)
    out = report(simulate(tasks, policy=policy, groups=4, gpus=16), 16)["overall"]
    assert out["tasks"] == 300
    assert out["gang_violations"] == 0
    assert 0 < out["utilisation"] <= 1
