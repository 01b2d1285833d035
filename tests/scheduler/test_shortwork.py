"""The borrowing pass's two rules for short work: the GPUs a large fabric keeps for it (scheduler/shortwork.py), and
backfill reservations only for work that has waited RESERVE_AFTER_S (scheduler/backfill.py)."""

from __future__ import annotations

from scheduler import decide
from scheduler import reasons as r
from scheduler.backfill import RESERVE_AFTER_S
from scheduler.model import Decisions, Job
from scheduler.shortwork import SHORT_WORK_S
from tests.scheduler.shapes import BOTH, FRAUD, POOL, SPARE, VISION, fabric, gpu_jobs, reserve, running_on, snapshot

LONG = SHORT_WORK_S + 60


def busy(n: int) -> list[Job]:
    """n one-GPU jobs of another team running on the pool."""
    return running_on(POOL, gpu_jobs(FRAUD, n, runtime_s=3600, name="busy"))


def reasons_of(d: Decisions) -> dict[str, str]:
    return {w.job_id: w.reason.code for w in d.waiting}


def test_a_32_gpu_pool_keeps_its_last_free_gpu_from_long_work() -> None:
    d = decide(snapshot([fabric(POOL, 32)], gpu_jobs(VISION, 2, runtime_s=LONG, name="long"), busy(30)))
    assert {a.job_id for a in d.admit} == {"long-0"}  # two free: one may go to long work, the last is kept
    assert reasons_of(d) == {"long-1": r.KEPT_FOR_SHORT_WORK}
    assert "kept free on pool for short work" in d.waiting[0].reason.message


def test_short_work_takes_the_gpu_kept_for_it() -> None:
    d = decide(snapshot([fabric(POOL, 32)], gpu_jobs(VISION, 1, runtime_s=SHORT_WORK_S, name="short"), busy(31)))
    assert {a.job_id for a in d.admit} == {"short-0"}


def test_a_pool_under_32_gpus_keeps_none() -> None:
    d = decide(snapshot([fabric(POOL, 31)], gpu_jobs(VISION, 1, runtime_s=LONG, name="long"), busy(30)))
    assert {a.job_id for a in d.admit} == {"long-0"}


def test_long_work_the_keep_holds_back_waits_for_that_fabric_and_leaves_the_next_to_others() -> None:
    """A queue over the 32-GPU pool (its last GPU kept) and a small spare fabric with room: long work waits for the
    pool, with the keep's reason, and reserves nothing on the spare; short work still goes on to the spare."""
    pending = gpu_jobs(VISION, 1, runtime_s=LONG, name="long", queue=BOTH, age_s=600)  # first in line
    pending += gpu_jobs(VISION, 2, runtime_s=SHORT_WORK_S, name="short", queue=BOTH)
    d = decide(snapshot([fabric(POOL, 32), fabric(SPARE, 4)], pending, busy(31)))
    assert reasons_of(d) == {"long-0": r.KEPT_FOR_SHORT_WORK}
    assert {(a.job_id, a.fabric_id) for a in d.admit} == {("short-0", POOL), ("short-1", SPARE)}
    alone = decide(snapshot([fabric(POOL, 32), fabric(SPARE, 4)], pending[:1], busy(30)))
    assert {(a.job_id, a.fabric_id) for a in alone.admit} == {("long-0", POOL)}  # two free: the keep holds one


def test_owed_long_work_takes_the_kept_gpu() -> None:
    """Work within its team's unused reservation is never held back for short work."""
    pending = gpu_jobs(VISION, 1, runtime_s=LONG, name="long")
    d = decide(snapshot([fabric(POOL, 32)], pending, busy(31), [reserve(VISION, POOL, 1)]))
    assert {a.job_id for a in d.admit} == {"long-0"}


def test_work_that_just_arrived_reserves_no_backfill_start() -> None:
    """At the head's start 6 GPUs are free and it needs 5: once it has waited RESERVE_AFTER_S only one GPU may run
    long beside it; before that, both long jobs behind it run now."""
    running = running_on(POOL, gpu_jobs(FRAUD, 2, 2, runtime_s=600, name="ends-soon"))
    for age, admitted in ((RESERVE_AFTER_S - 60, {"long-0", "long-1"}), (RESERVE_AFTER_S + 60, {"long-0"})):
        pending = gpu_jobs(VISION, 1, 5, name="head", age_s=age) + gpu_jobs(VISION, 2, 1, name="long", runtime_s=7200)
        d = decide(snapshot([fabric(POOL, 8)], pending, running))
        assert {a.job_id for a in d.admit} == admitted
        assert reasons_of(d)["head-0"] == r.NO_CAPACITY
