"""The policy, rule by rule, as table tests named as sentences."""

from __future__ import annotations

import ast
import gc
import pathlib
import sys
from dataclasses import dataclass, field, replace
from datetime import timedelta

import pytest

from scheduler import Job, Snapshot, decide
from scheduler import reasons as r
from scheduler.model import TierState
from tests.scheduler.shapes import (
    BOTH,
    FRAUD,
    NLP,
    NOW,
    POOL,
    SCAVENGE,
    SPARE,
    URGENT,
    VISION,
    fabric,
    gpu_jobs,
    queues,
    reserve,
    running_on,
    snapshot,
    tiers,
)


def idle(jobs: list[Job], name: str = "idle") -> list[Job]:
    """The same jobs, those named `name-...` with their GPUs idle now (the idle-GPU step warned their owners)."""
    return [replace(j, gpus_idle=True) if j.id.startswith(f"{name}-") else j for j in jobs]


ALICE, BOB, AGENT = 21, 22, 29  # owners
RESEARCH, OTHER = 50, 4  # RESEARCH: a department of vision and fraud; OTHER: a team in no department
IN_RESEARCH = {"parents": {VISION: RESEARCH, FRAUD: RESEARCH}}


@dataclass
class Case:
    name: str
    fabrics: list
    pending: list[Job]
    running: list[Job] = field(default_factory=list)
    quotas: list = field(default_factory=list)
    extra: dict = field(default_factory=dict)
    want_admitted: set[str] | None = None
    want_on: dict[str, int] = field(default_factory=dict)
    want_reasons: dict[str, str] = field(default_factory=dict)
    want_preempted: list[str] = field(default_factory=list)
    want_start_in: dict[str, int | None] = field(default_factory=dict)  # job -> seconds from now


CASES = [
    Case(
        "33 one-GPU jobs on a 32-GPU pool: the last one waits for capacity",
        fabrics=[fabric(POOL, 32)],
        pending=gpu_jobs(VISION, 33),
        want_admitted={f"vision-{i}" for i in range(32)},
        want_reasons={"vision-32": r.NO_CAPACITY},
    ),
    Case(
        "a team at its limit waits with free GPUs around, and the other team is admitted",
        fabrics=[fabric(POOL, 8)],
        pending=gpu_jobs(VISION, 3, 2) + gpu_jobs(FRAUD, 1, 2),
        quotas=[reserve(VISION, POOL, limit=4)],
        want_admitted={"vision-0", "vision-1", "fraud-0"},
        want_reasons={"vision-2": r.GROUP_AT_LIMIT},
    ),
    Case(
        "a limit across all fabrics caps the sum over every pool",
        fabrics=[fabric(POOL, 2), fabric(SPARE, 8)],
        pending=gpu_jobs(VISION, 4, queue=BOTH),
        quotas=[reserve(VISION, None, limit=3)],
        want_on={"vision-0": POOL, "vision-1": POOL, "vision-2": SPARE},
        want_reasons={"vision-3": r.GROUP_AT_LIMIT},
    ),
    Case(
        "a service identity at its own limit waits while its team has room",
        fabrics=[fabric(POOL, 8)],
        pending=gpu_jobs(VISION, 3, owner=7),
        extra={"owner_limits": {7: 2000}},
        want_admitted={"vision-0", "vision-1"},
        want_reasons={"vision-2": r.OWNER_AT_LIMIT},
    ),
    Case(
        "each member may hold 2 of the team's GPUs: alice's third waits while bob's run",
        fabrics=[fabric(POOL, 8)],
        pending=gpu_jobs(VISION, 3, owner=ALICE, name="alice") + gpu_jobs(VISION, 2, owner=BOB, name="bob"),
        extra={"member_limits": {VISION: 2000}},
        want_admitted={"alice-0", "alice-1", "bob-0", "bob-1"},
        want_reasons={"alice-2": r.MEMBER_AT_LIMIT},
    ),
    Case(
        "a member's cap counts what the member already runs, and a CPU-only job is never held by it",
        fabrics=[fabric(POOL, 8)],
        running=running_on(POOL, gpu_jobs(VISION, 2, owner=ALICE, name="old")),
        pending=gpu_jobs(VISION, 1, 0.5, owner=ALICE, name="half") + gpu_jobs(VISION, 1, 0, owner=ALICE, name="cpu"),
        extra={"member_limits": {VISION: 2000}},
        want_admitted={"cpu-0"},
        want_reasons={"half-0": r.MEMBER_AT_LIMIT},
    ),
    Case(
        "an agent identity is held by its own limit, not by the cap on people",
        fabrics=[fabric(POOL, 8)],
        pending=gpu_jobs(VISION, 3, owner=AGENT, name="agent"),
        extra={"member_limits": {VISION: 1000}, "owner_limits": {AGENT: 3000}, "agents": frozenset({AGENT})},
        want_admitted={"agent-0", "agent-1", "agent-2"},
    ),
    Case(
        "a queue may hold at most its share of the pool: the third notebook waits, other queues' work runs",
        fabrics=[fabric(POOL, 8)],
        pending=gpu_jobs(VISION, 3, name="nb") + gpu_jobs(FRAUD, 2, queue=SCAVENGE, name="other"),
        extra={"queues": queues(train_share=25)},
        want_admitted={"nb-0", "nb-1", "other-0", "other-1"},
        want_reasons={"nb-2": r.QUEUE_AT_SHARE},
    ),
    Case(
        "an agent identity's reservation is owed to it though its teammates fill the team's: borrowed work goes",
        fabrics=[fabric(POOL, 4)],
        running=running_on(
            POOL, gpu_jobs(VISION, 2, owner=ALICE, name="alice") + gpu_jobs(FRAUD, 2, queue=SCAVENGE, name="borrowed")
        ),
        pending=gpu_jobs(VISION, 1, owner=AGENT, name="agent"),
        quotas=[reserve(VISION, POOL, 2)],
        extra={"owner_reservations": {AGENT: 1000}, "agents": frozenset({AGENT})},
        want_admitted={"agent-0"},
        want_preempted=["borrowed-1"],
    ),
    Case(
        "without a reservation of its own the same agent waits: its team's reservation is in use",
        fabrics=[fabric(POOL, 4)],
        running=running_on(
            POOL, gpu_jobs(VISION, 2, owner=ALICE, name="alice") + gpu_jobs(FRAUD, 2, queue=SCAVENGE, name="borrowed")
        ),
        pending=gpu_jobs(VISION, 1, owner=AGENT, name="agent"),
        quotas=[reserve(VISION, POOL, 2)],
        want_admitted=set(),
        want_reasons={"agent-0": r.NO_CAPACITY},
    ),
    Case(
        "a department's limit caps all its teams together, and the pending reason names the department",
        fabrics=[fabric(POOL, 8)],
        pending=gpu_jobs(VISION, 3) + gpu_jobs(FRAUD, 2),
        quotas=[reserve(RESEARCH, POOL, limit=4)],
        extra=IN_RESEARCH,
        want_admitted={"vision-0", "vision-1", "fraud-0", "fraud-1"},  # in fair-share order
        want_reasons={"vision-2": r.DEPARTMENT_AT_LIMIT},
    ),
    Case(
        "a department's limit across all fabrics caps its teams over every pool",
        fabrics=[fabric(POOL, 2), fabric(SPARE, 8)],
        pending=gpu_jobs(VISION, 2, queue=BOTH) + gpu_jobs(FRAUD, 2, queue=BOTH),
        quotas=[reserve(RESEARCH, None, limit=3)],
        extra=IN_RESEARCH,
        want_admitted={"vision-0", "fraud-0", "fraud-1"},
        want_reasons={"vision-1": r.DEPARTMENT_AT_LIMIT},
    ),
    Case(
        "a team is owed its department's unused reservation: it takes it back from another department's borrowing",
        fabrics=[fabric(POOL, 8)],
        running=running_on(POOL, gpu_jobs(NLP, 8, queue=SCAVENGE, name="nlp")),
        pending=gpu_jobs(VISION, 1, 4),
        quotas=[reserve(RESEARCH, POOL, 4), reserve(VISION, POOL, 2), reserve(FRAUD, POOL, 2)],
        extra=IN_RESEARCH,
        want_admitted={"vision-0"},
        want_preempted=["nlp-7", "nlp-6", "nlp-5", "nlp-4"],
    ),
    Case(
        "with no department the same team is owed only its own reservation: its 4 GPUs wait",
        fabrics=[fabric(POOL, 8)],
        running=running_on(POOL, gpu_jobs(NLP, 8, queue=SCAVENGE, name="nlp")),
        pending=gpu_jobs(VISION, 1, 4),
        quotas=[reserve(RESEARCH, POOL, 4), reserve(VISION, POOL, 2), reserve(FRAUD, POOL, 2)],
        want_admitted=set(),
        want_reasons={"vision-0": r.NO_CAPACITY},
    ),
    Case(
        "what a team borrows within its department's reservation is not taken by an outside team; outside work is",
        fabrics=[fabric(POOL, 8)],
        running=running_on(POOL, gpu_jobs(NLP, 4, queue=SCAVENGE, name="nlp") + gpu_jobs(VISION, 4, queue=SCAVENGE)),
        pending=gpu_jobs(OTHER, 1, 2, name="other"),
        quotas=[reserve(RESEARCH, POOL, 4), reserve(VISION, POOL, 2), reserve(FRAUD, POOL, 2), reserve(OTHER, POOL, 2)],
        extra=IN_RESEARCH,
        want_admitted={"other-0"},
        want_preempted=["nlp-3", "nlp-2"],
    ),
    Case(
        "without the department the outside team takes the newest borrowed work, the vision team's",
        fabrics=[fabric(POOL, 8)],
        running=running_on(POOL, gpu_jobs(NLP, 4, queue=SCAVENGE, name="nlp") + gpu_jobs(VISION, 4, queue=SCAVENGE)),
        pending=gpu_jobs(OTHER, 1, 2, name="other"),
        quotas=[reserve(RESEARCH, POOL, 4), reserve(VISION, POOL, 2), reserve(FRAUD, POOL, 2), reserve(OTHER, POOL, 2)],
        want_admitted={"other-0"},
        want_preempted=["vision-3", "vision-2"],
    ),
    Case(
        "a sister team takes back what was borrowed of its reservation within the department",
        fabrics=[fabric(POOL, 8)],
        running=running_on(POOL, gpu_jobs(NLP, 4, queue=SCAVENGE, name="nlp") + gpu_jobs(VISION, 4, queue=SCAVENGE)),
        pending=gpu_jobs(FRAUD, 1, 2),
        quotas=[reserve(RESEARCH, POOL, 4), reserve(VISION, POOL, 2), reserve(FRAUD, POOL, 2)],
        extra=IN_RESEARCH,
        want_admitted={"fraud-0"},
        want_preempted=["vision-3", "vision-2"],
    ),
    Case(
        "four quarter-GPU jobs share one GPU exactly; a fifth waits",
        fabrics=[fabric(POOL, 1)],
        pending=gpu_jobs(VISION, 5, 0.25),
        want_admitted={"vision-0", "vision-1", "vision-2", "vision-3"},
        want_reasons={"vision-4": r.NO_CAPACITY},
    ),
    Case(
        "where GPUs cannot be shared, a quarter-GPU job takes a whole GPU",
        fabrics=[fabric(POOL, 2, sharing=False)],
        pending=gpu_jobs(VISION, 3, 0.25),
        want_admitted={"vision-0", "vision-1"},
        want_reasons={"vision-2": r.NO_CAPACITY},
    ),
    Case(
        "high priority goes first when only one fits, even if younger",
        fabrics=[fabric(POOL, 1)],
        pending=gpu_jobs(VISION, 1, priority="low", name="low", age_s=600)
        + gpu_jobs(FRAUD, 1, priority="high", name="high"),
        want_admitted={"high-0"},
        want_reasons={"low-0": r.NO_CAPACITY},
    ),
    Case(
        "a team far over its fair share goes after a team under it",
        fabrics=[fabric(POOL, 1)],
        pending=gpu_jobs(VISION, 1, age_s=60) + gpu_jobs(FRAUD, 1),
        extra={"usage": {VISION: 16.0, FRAUD: 0.0}, "shares": {VISION: 4.0, FRAUD: 4.0}},
        want_admitted={"fraud-0"},
    ),
    Case(
        "within a team and class, older work goes first",
        fabrics=[fabric(POOL, 1)],
        pending=gpu_jobs(VISION, 2),
        want_admitted={"vision-0"},
    ),
    Case(
        "of two jobs submitted together, the one with the shorter runtime limit goes first",
        fabrics=[fabric(POOL, 1)],
        pending=gpu_jobs(VISION, 1, name="long", runtime_s=8 * 3600) + gpu_jobs(VISION, 1, name="short", runtime_s=600),
        want_admitted={"short-0"},
        want_reasons={"long-0": r.NO_CAPACITY},
    ),
    Case(
        "a long job that has waited two hours goes before fresh short work: age still lifts it",
        fabrics=[fabric(POOL, 1)],
        pending=gpu_jobs(VISION, 1, name="long", age_s=2 * 3600, runtime_s=8 * 3600)
        + gpu_jobs(FRAUD, 1, name="short", runtime_s=600),
        want_admitted={"long-0"},
    ),
    Case(
        "reserved but idle capacity is lent: vision fills the pool while fraud has no work",
        fabrics=[fabric(POOL, 8)],
        pending=gpu_jobs(VISION, 8),
        quotas=[reserve(FRAUD, POOL, 4), reserve(VISION, POOL, 4)],
        want_admitted={f"vision-{i}" for i in range(8)},
    ),
    Case(
        "fraud reserves 4 GPUs, vision fills the pool while fraud is idle, fraud submits: fraud runs within one cycle",
        fabrics=[fabric(POOL, 8)],
        running=running_on(POOL, gpu_jobs(VISION, 8, queue=SCAVENGE), started_s_ago=100),
        pending=gpu_jobs(FRAUD, 1, 4),
        quotas=[reserve(FRAUD, POOL, 4), reserve(VISION, POOL, 4)],
        want_admitted={"fraud-0"},
        want_preempted=["vision-7", "vision-6", "vision-5", "vision-4"],
    ),
    Case(
        "preemption takes the lowest priority first, then the newest",
        fabrics=[fabric(POOL, 4)],
        running=running_on(
            POOL,
            gpu_jobs(VISION, 2, queue=SCAVENGE, priority="low", name="low")
            + gpu_jobs(VISION, 2, queue=SCAVENGE, name="normal"),
            started_s_ago=100,
        ),
        pending=gpu_jobs(FRAUD, 1, 1),
        quotas=[reserve(FRAUD, POOL, 2)],
        want_admitted={"fraud-0"},
        want_preempted=["low-1"],
    ),
    Case(
        "work in a queue that does not allow preemption is never preempted; the owner waits for capacity",
        fabrics=[fabric(POOL, 8)],
        running=running_on(POOL, gpu_jobs(VISION, 8), started_s_ago=100),
        pending=gpu_jobs(FRAUD, 1, 4),
        quotas=[reserve(FRAUD, POOL, 4)],
        want_admitted=set(),
        want_reasons={"fraud-0": r.NO_CAPACITY},
        want_start_in={"fraud-0": 3600 - 100 - 4},  # when the 4th of 8 one-hour jobs, a second apart, ends
    ),
    Case(
        "preemption never takes a team below its own reservation",
        fabrics=[fabric(POOL, 8)],
        running=running_on(POOL, gpu_jobs(VISION, 4, queue=SCAVENGE) + gpu_jobs(FRAUD, 4, queue=SCAVENGE)),
        pending=gpu_jobs(FRAUD, 1, 1, name="more") + gpu_jobs(VISION, 1, 1, name="late"),
        quotas=[reserve(FRAUD, POOL, 4), reserve(VISION, POOL, 4)],
        want_admitted=set(),
        want_preempted=[],
    ),
    Case(
        "a team owed its reservation takes work whose GPUs sit idle, even within the idle team's own reservation",
        fabrics=[fabric(POOL, 4)],
        running=idle(running_on(POOL, gpu_jobs(VISION, 2, name="idle") + gpu_jobs(VISION, 2, name="busy"))),
        pending=gpu_jobs(FRAUD, 1, 2),
        quotas=[reserve(FRAUD, POOL, 2), reserve(VISION, POOL, 4)],
        extra={"queues": queues(idle_preemptible_train=True)},
        want_admitted={"fraud-0"},
        want_preempted=["idle-1", "idle-0"],
    ),
    Case(
        "idle work goes before borrowed busy work, whatever their priorities",
        fabrics=[fabric(POOL, 4)],
        running=idle(
            running_on(
                POOL,
                gpu_jobs(VISION, 2, queue=SCAVENGE, priority="low", name="borrowed") + gpu_jobs(VISION, 2, name="idle"),
            )
        ),
        pending=gpu_jobs(FRAUD, 1, 2),
        quotas=[reserve(FRAUD, POOL, 2)],
        extra={"queues": queues(idle_preemptible_train=True)},
        want_admitted={"fraud-0"},
        want_preempted=["idle-1", "idle-0"],
    ),
    Case(
        "idle GPUs in a queue that does not mark idle work preemptible are not taken: the owed team waits",
        fabrics=[fabric(POOL, 4)],
        running=idle(running_on(POOL, gpu_jobs(VISION, 4, name="idle"), started_s_ago=100)),
        pending=gpu_jobs(FRAUD, 1, 2),
        quotas=[reserve(FRAUD, POOL, 2)],
        extra={"queues": queues()},
        want_admitted=set(),
        want_reasons={"fraud-0": r.NO_CAPACITY},
    ),
    Case(
        "a team's own waiting work holds what frees up: vision's new work may not take it",
        fabrics=[fabric(POOL, 8)],
        running=running_on(POOL, gpu_jobs(VISION, 6, name="old")),
        pending=gpu_jobs(VISION, 1, 2, age_s=60) + gpu_jobs(FRAUD, 1, 4, name="owed"),
        quotas=[reserve(FRAUD, POOL, 4)],
        want_admitted=set(),
        want_reasons={"vision-0": r.HELD_FOR_RESERVATIONS, "owed-0": r.NO_CAPACITY},
    ),
    Case(
        "a job bigger than its team's reservation holds nothing: two such giants never block each other",
        fabrics=[fabric(POOL, 8)],
        pending=gpu_jobs(VISION, 1, 8, name="giant-v", age_s=10) + gpu_jobs(FRAUD, 1, 8, name="giant-f"),
        quotas=[reserve(FRAUD, POOL, 2), reserve(VISION, POOL, 2)],
        want_admitted={"giant-v-0"},
        want_reasons={"giant-f-0": r.NO_CAPACITY},
    ),
    Case(
        "a 2-node gang of 4 GPUs a node waits whole when only 6 are free",
        fabrics=[fabric(POOL, 8)],
        running=running_on(POOL, gpu_jobs(FRAUD, 2, name="busy")),
        pending=gpu_jobs(VISION, 1, 4, nodes=2),
        want_admitted=set(),
        want_reasons={"vision-0": r.GANG_DOES_NOT_FIT},
    ),
    Case(
        "backfill: a short job runs before the blocked head, a long one waits behind it",
        fabrics=[fabric(POOL, 4)],
        running=running_on(POOL, gpu_jobs(FRAUD, 2, 1, runtime_s=600, name="ends-soon")),
        pending=gpu_jobs(VISION, 1, 4, name="head", age_s=4 * 3600)
        + gpu_jobs(VISION, 1, 2, name="short", runtime_s=300)
        + gpu_jobs(VISION, 1, 2, name="long", age_s=3000, runtime_s=7200),  # old enough to come before the short one
        want_admitted={"short-0"},
        want_reasons={"head-0": r.NO_CAPACITY, "long-0": r.BEHIND_HIGHER_PRIORITY},
        want_start_in={"head-0": 600},
    ),
    Case(
        "backfill: a long job that uses only what the head leaves free may run",
        fabrics=[fabric(POOL, 8)],
        running=running_on(POOL, gpu_jobs(FRAUD, 2, 2, runtime_s=600, name="ends-soon")),
        pending=gpu_jobs(VISION, 1, 5, name="head", age_s=2 * 3600)
        + gpu_jobs(VISION, 2, 1, name="long", runtime_s=7200),
        want_admitted={"long-0"},  # at the head's start 6 are free, it needs 5: one GPU may run long, not two
        want_reasons={"head-0": r.NO_CAPACITY, "long-1": r.BEHIND_HIGHER_PRIORITY},
    ),
    Case(
        "backfill reserves for the first few waiting, not only the head: a long job that fits beside the head's "
        "start but would push back the second one's waits, a short one runs",
        fabrics=[fabric(POOL, 5)],
        running=running_on(POOL, gpu_jobs(FRAUD, 1, 2, runtime_s=600, name="ends-soon"))
        + running_on(POOL, gpu_jobs(FRAUD, 1, 2, runtime_s=1200, name="ends-later")),
        pending=gpu_jobs(VISION, 1, 2, name="head", age_s=4 * 3600)
        + gpu_jobs(NLP, 1, 3, name="second", age_s=3 * 3600)
        + gpu_jobs(VISION, 1, 1, name="long", age_s=1500, runtime_s=7200)  # old enough to come before the short one
        + gpu_jobs(VISION, 1, 1, name="short", runtime_s=300),
        want_admitted={"short-0"},  # at 1200 s the head holds 2 of 5 and the second needs the other 3
        want_reasons={"head-0": r.NO_CAPACITY, "second-0": r.NO_CAPACITY, "long-0": r.BEHIND_HIGHER_PRIORITY},
        want_start_in={"head-0": 600, "second-0": 1200},
    ),
    Case(
        "routing: when the first target is full the work goes to the second",
        fabrics=[fabric(POOL, 1), fabric(SPARE, 2)],
        pending=gpu_jobs(VISION, 3, queue=BOTH),
        want_on={"vision-0": POOL, "vision-1": SPARE, "vision-2": SPARE},
    ),
    Case(
        "an unavailable fabric admits nothing and says so; a queue with a second target uses that",
        fabrics=[fabric(POOL, 8, healthy=False), fabric(SPARE, 8)],
        pending=gpu_jobs(FRAUD, 1) + gpu_jobs(VISION, 1, queue=BOTH),
        want_on={"vision-0": SPARE},
        want_reasons={"fraud-0": r.FABRIC_UNAVAILABLE},
    ),
    Case(
        "a request bigger than the whole fabric is told so",
        fabrics=[fabric(POOL, 8)],
        pending=gpu_jobs(VISION, 1, 4, nodes=4),
        want_reasons={"vision-0": r.TOO_BIG},
    ),
    Case(
        "a pool of 8 GPUs with all nodes down: GPU work waits for capacity, bigger work is still too big",
        fabrics=[fabric(POOL, 0, declared_gpus=8)],
        pending=gpu_jobs(VISION, 1, 2) + gpu_jobs(FRAUD, 1, 4, nodes=4),
        want_admitted=set(),
        want_reasons={"vision-0": r.NO_CAPACITY, "fraud-0": r.TOO_BIG},
    ),
    Case(
        "a team at its limit of 4 GPUs with room to spare: the next job starts when its first running job ends",
        fabrics=[fabric(POOL, 16)],
        pending=gpu_jobs(VISION, 2, 2, name="next"),
        running=running_on(POOL, gpu_jobs(VISION, 2, 2, runtime_s=3600), started_s_ago=600),
        quotas=[reserve(VISION, POOL, 0, limit=4)],
        want_admitted=set(),
        want_reasons={"next-0": r.GROUP_AT_LIMIT, "next-1": r.GROUP_AT_LIMIT},
        # the first running job ends 3000 + 1 s from now, the second 3000 s; the second waiting one then waits
        # for its predecessor's hour too
        want_start_in={"next-0": 3000 - 1, "next-1": 3000},
    ),
    Case(
        "a pool of 8 GPUs with 4 up: four one-GPU jobs run, the fifth waits for capacity",
        fabrics=[fabric(POOL, 4, declared_gpus=8)],
        pending=gpu_jobs(VISION, 5),
        want_admitted={f"vision-{i}" for i in range(4)},
        want_reasons={"vision-4": r.NO_CAPACITY},
    ),
    # -- Priority tiers IT defines ---------------------------------------------------------------------------
    Case(
        "one GPU free: a newer job of a heavier tier IT defined runs before an older normal one",
        fabrics=[fabric(POOL, 1)],
        pending=gpu_jobs(VISION, 1, age_s=600) + gpu_jobs(FRAUD, 1, priority="gold"),
        extra={"tiers": tiers(gold=TierState(5, rank=3))},
        want_admitted={"fraud-0"},
        want_reasons={"vision-0": r.NO_CAPACITY},
    ),
    Case(
        "one GPU free: a tier IT weighs below low lets even low work go first",
        fabrics=[fabric(POOL, 1)],
        pending=gpu_jobs(VISION, 1, priority="spare", age_s=600) + gpu_jobs(FRAUD, 1, priority="low"),
        extra={"tiers": tiers(spare=TierState(-2, rank=-1))},
        want_admitted={"fraud-0"},
    ),
    Case(
        "IT reweighs high to below normal: the high job now waits behind the normal one",
        fabrics=[fabric(POOL, 1)],
        pending=gpu_jobs(VISION, 1, priority="high") + gpu_jobs(FRAUD, 1),
        extra={"tiers": tiers(high=TierState(0.5, rank=2))},
        want_admitted={"fraud-0"},
    ),
    Case(
        "a tier that may preempt takes borrowed capacity from a lower tier, newest first",
        fabrics=[fabric(POOL, 4)],
        running=running_on(POOL, gpu_jobs(VISION, 4, queue=SCAVENGE, priority="low"), started_s_ago=100),
        pending=gpu_jobs(FRAUD, 1, 2, priority="urgent"),
        extra={"tiers": tiers(urgent=URGENT)},
        want_admitted={"fraud-0"},
        want_preempted=["vision-3", "vision-2"],
    ),
    Case(
        "a tier without the right to preempt waits for capacity, however heavy",
        fabrics=[fabric(POOL, 4)],
        running=running_on(POOL, gpu_jobs(VISION, 4, queue=SCAVENGE, priority="low"), started_s_ago=100),
        pending=gpu_jobs(FRAUD, 1, 2, priority="heavy"),
        extra={"tiers": tiers(heavy=TierState(9, rank=3))},
        want_admitted=set(),
        want_reasons={"fraud-0": r.NO_CAPACITY},
    ),
    Case(
        "tier preemption takes the lowest tier first, then the newest",
        fabrics=[fabric(POOL, 4)],
        running=running_on(
            POOL,
            gpu_jobs(VISION, 2, queue=SCAVENGE, priority="low", name="low")
            + gpu_jobs(VISION, 2, queue=SCAVENGE, name="normal"),
            started_s_ago=100,
        ),
        pending=gpu_jobs(FRAUD, 1, 1, priority="urgent"),
        extra={"tiers": tiers(urgent=URGENT)},
        want_admitted={"fraud-0"},
        want_preempted=["low-1"],
    ),
    Case(
        "tier preemption never takes work of the same tier or a higher one",
        fabrics=[fabric(POOL, 4)],
        running=running_on(
            POOL,
            gpu_jobs(VISION, 2, queue=SCAVENGE, priority="urgent", name="same")
            + gpu_jobs(VISION, 2, queue=SCAVENGE, priority="top", name="top"),
        ),
        pending=gpu_jobs(FRAUD, 1, 1, priority="urgent"),
        extra={"tiers": tiers(urgent=URGENT, top=TierState(6, True, rank=4))},
        want_admitted=set(),
        want_reasons={"fraud-0": r.NO_CAPACITY},
    ),
    Case(
        "tier preemption never takes a team below its own reservation",
        fabrics=[fabric(POOL, 4)],
        running=running_on(POOL, gpu_jobs(VISION, 4, queue=SCAVENGE, priority="low")),
        pending=gpu_jobs(FRAUD, 1, 1, priority="urgent"),
        quotas=[reserve(VISION, POOL, 4)],
        extra={"tiers": tiers(urgent=URGENT)},
        want_admitted=set(),
        want_reasons={"fraud-0": r.NO_CAPACITY},
    ),
    Case(
        "tier preemption takes only what a team borrows: of 4 low GPUs with 3 reserved, one may go, not two",
        fabrics=[fabric(POOL, 4)],
        running=running_on(POOL, gpu_jobs(VISION, 4, queue=SCAVENGE, priority="low")),
        pending=gpu_jobs(FRAUD, 1, 1, priority="urgent", name="one") + gpu_jobs(FRAUD, 1, 2, priority="urgent"),
        quotas=[reserve(VISION, POOL, 3)],
        extra={"tiers": tiers(urgent=URGENT)},
        want_admitted={"one-0"},
        want_preempted=["vision-3"],
    ),
    Case(
        "tier preemption never takes work in a queue that does not allow preemption",
        fabrics=[fabric(POOL, 4)],
        running=running_on(POOL, gpu_jobs(VISION, 4, priority="low")),
        pending=gpu_jobs(FRAUD, 1, 1, priority="urgent"),
        extra={"tiers": tiers(urgent=URGENT)},
        want_admitted=set(),
        want_reasons={"fraud-0": r.NO_CAPACITY},
    ),
    Case(
        "tier preemption does not take a team's idle work within its reservation: that is for teams owed theirs",
        fabrics=[fabric(POOL, 4)],
        running=idle(running_on(POOL, gpu_jobs(VISION, 4, priority="low", name="idle"))),
        pending=gpu_jobs(FRAUD, 1, 1, priority="urgent"),
        quotas=[reserve(VISION, POOL, 4)],
        extra={"queues": queues(idle_preemptible_train=True), "tiers": tiers(urgent=URGENT)},
        want_admitted=set(),
        want_reasons={"fraud-0": r.NO_CAPACITY},
    ),
    Case(
        "tier preemption leaves alone capacity another team waits for ahead of it in line",
        fabrics=[fabric(POOL, 4)],
        running=running_on(POOL, gpu_jobs(VISION, 4, queue=SCAVENGE, priority="low"), started_s_ago=100),
        pending=gpu_jobs(NLP, 1, 4, priority="top", name="ahead") + gpu_jobs(FRAUD, 1, 2, priority="urgent"),
        extra={"tiers": tiers(urgent=URGENT, top=TierState(6, rank=4))},
        want_admitted=set(),
        want_reasons={"ahead-0": r.NO_CAPACITY, "fraud-0": r.NO_CAPACITY},
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_policy(case: Case) -> None:
    extra = dict(case.extra)
    if case.want_preempted or any(j.queue_id == SCAVENGE for j in case.running):
        extra.setdefault("queues", queues())
    decisions = decide(snapshot(case.fabrics, case.pending, case.running, case.quotas, **extra))
    admitted = {a.job_id: a.fabric_id for a in decisions.admit}
    waiting = {w.job_id: w for w in decisions.waiting}
    if case.want_admitted is not None:
        assert set(admitted) == case.want_admitted
    for job_id, fabric_id in case.want_on.items():
        assert admitted[job_id] == fabric_id
    for job_id, code in case.want_reasons.items():
        assert waiting[job_id].reason.code == code, waiting[job_id].reason.message
    assert [p.job_id for p in decisions.preempt] == case.want_preempted
    for job_id, seconds in case.want_start_in.items():
        want = None if seconds is None else NOW + timedelta(seconds=seconds)
        assert waiting[job_id].estimated_start == want
    assert set(admitted).isdisjoint(waiting)
    assert set(admitted) | set(waiting) == {j.id for j in case.pending}


def test_every_reason_gives_the_numbers_in_plain_words() -> None:
    reason = r.group_at_limit("dgx", used=(4000, 8000, 0), limit=(4000, 10**9, 10**9), need=(2000, 1000, 0))
    assert reason.message == "Your team is at its limit on dgx: 4 GPUs of its limit of 4 in use, this needs 2 more."
    waiting = decide(snapshot([fabric(POOL, 2)], gpu_jobs(VISION, 1, 4, nodes=1))).waiting[0]
    assert waiting.reason.message == (
        "pool can never hold this: it has 2 GPUs, 1000 CPUs, 9765.62 GB in all, this needs 4 GPUs, 1 CPU, 1 GB."
    )


def test_work_on_a_pool_whose_nodes_are_down_says_how_much_is_free() -> None:
    running = running_on(POOL, gpu_jobs(FRAUD, 3, name="before"))  # started when more nodes were up
    waiting = decide(snapshot([fabric(POOL, 2, declared_gpus=8)], gpu_jobs(VISION, 1, 1), running)).waiting[0]
    assert waiting.reason.message == (
        "Waiting for capacity on pool: needs 1 GPU, 1 CPU, 1 GB; free now 0 GPUs, 997 CPUs, 9762.62 GB."
    )


def test_the_scheduler_imports_no_django_and_reads_no_clock() -> None:
    root = pathlib.Path(__file__).resolve().parents[2] / "scheduler"
    for path in root.rglob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            else:
                if isinstance(node, ast.Attribute) and node.attr in {"now", "utcnow", "time", "today"}:
                    base = node.value
                    assert not (isinstance(base, ast.Name) and base.id in {"datetime", "time", "date"}), (
                        f"{path.name} reads the clock: `now` must come from the snapshot"
                    )
                continue
            for name in names:
                assert not name.startswith(("django", "portal")), f"{path.name} imports {name}"


def test_deciding_leaves_the_garbage_collector_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    """decide() neither turns the collector off nor on: that is its caller's choice (the worker freezes its heap
    once instead, tasks._freeze_heap_once), and the other threads of the process keep collecting."""
    pending = gpu_jobs(VISION, 3, 1)
    seen: list[bool] = []
    module = sys.modules["scheduler.decide"]
    ordered = module.ordered

    def watched(s: Snapshot) -> list[Job]:
        seen.append(gc.isenabled())
        return ordered(s)

    monkeypatch.setattr(module, "ordered", watched)
    assert gc.isenabled()
    decide(snapshot([fabric(POOL, 2)], pending))
    assert seen == [True]
    assert gc.isenabled()
    gc.disable()
    try:
        decide(snapshot([fabric(POOL, 2)], pending))
        assert seen == [True, False]
        assert not gc.isenabled()
    finally:
        gc.enable()
    root = pathlib.Path(__file__).resolve().parents[2] / "scheduler"
    for path in root.rglob("*.py"):
        names = {a.name for n in ast.walk(ast.parse(path.read_text())) if isinstance(n, ast.Import) for a in n.names}
        assert "gc" not in names, f"{path.name} imports gc: the collector's policy is decide()'s caller's"


def test_waiting_work_knows_its_place_in_its_queues_line():
    """Three 4-GPU jobs on a 4-GPU pool: one runs, the others are 1st and 2nd in their queue's line; another
    queue's line is counted apart."""
    pending = gpu_jobs(VISION, 3, 4, age_s=100) + gpu_jobs(FRAUD, 2, 4, queue=BOTH)
    decisions = decide(snapshot([fabric(POOL, 4), fabric(SPARE, 0)], pending))
    assert len(decisions.admit) == 1
    by_queue: dict[int, list[int]] = {}
    queue_of = {j.id: j.queue_id for j in pending}
    for w in decisions.waiting:
        by_queue.setdefault(queue_of[w.job_id], []).append(w.position)
    assert sorted(map(sorted, by_queue.values())) == [[1, 2], [1, 2]]
