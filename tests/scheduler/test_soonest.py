"""Route on the soonest start (scheduler/soonest.py): a queue over a busy shared fabric and one with room sends
work where it starts now; reservations, limits and gangs stay as they are."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

from fabrics.base import Resources
from fabrics.live import FreeNow, Node, from_nodes
from scheduler import decide
from scheduler.estimates import shape_of
from scheduler.model import Job
from scheduler.soonest import expected_start
from tests.scheduler.shapes import (
    BOTH,
    FRAUD,
    NOW,
    POOL,
    SPARE,
    VISION,
    fabric,
    gpu_jobs,
    gpus,
    reserve,
    snapshot,
)

# POOL: a shared Slurm cluster; SPARE: a second fabric. Both declared with 8 GPUs.
FABRICS = [fabric(POOL, 8), fabric(SPARE, 8)]


def live(free_gpus: int, gpu_type: str = "a100", *, next_start_s: int | None = None, total: int = 8) -> FreeNow:
    node = Node("n1", ("gpu",), {gpu_type: total}, {gpu_type: free_gpus}, Resources(free_gpus * 1000, 64000, 10**6))
    return from_nodes([node], None if next_start_s is None else NOW + timedelta(seconds=next_start_s))


def admitted(jobs: list[Job], **observed: FreeNow) -> dict[str, int]:
    names = {"pool": POOL, "spare": SPARE}
    decisions = decide(snapshot(FABRICS, jobs, live={names[k]: v for k, v in observed.items()}))
    return {a.job_id: a.fabric_id for a in decisions.admit}


def test_without_live_state_work_goes_in_the_queues_order():
    assert set(admitted(gpu_jobs(VISION, 2, queue=BOTH)).values()) == {POOL}


def test_work_goes_at_once_to_the_target_with_room_when_the_first_is_filled_by_others():
    placed = admitted(gpu_jobs(VISION, 2, queue=BOTH), pool=live(0, next_start_s=1800), spare=live(8))
    assert placed == {"vision-0": SPARE, "vision-1": SPARE}


def test_room_is_used_up_within_a_cycle_and_the_rest_waits_where_its_fabric_plans_to_start_it():
    placed = admitted(gpu_jobs(VISION, 3, each=2, queue=BOTH), pool=live(0, next_start_s=1800), spare=live(4))
    assert placed == {"vision-0": SPARE, "vision-1": SPARE, "vision-2": POOL}


def test_with_both_full_work_waits_on_the_fabric_that_gives_an_estimate():
    placed = admitted(gpu_jobs(VISION, 1, queue=BOTH), pool=live(0, next_start_s=600), spare=live(0))
    assert placed == {"vision-0": POOL}


def test_the_sooner_estimate_wins_when_neither_has_room():
    placed = admitted(gpu_jobs(VISION, 1, queue=BOTH), pool=live(0, next_start_s=3600), spare=live(0, next_start_s=60))
    assert placed == {"vision-0": SPARE}


def test_a_limit_still_holds_whatever_is_free():
    jobs = gpu_jobs(VISION, 1, queue=BOTH)
    observed = {POOL: live(0, next_start_s=600), SPARE: live(8)}
    decisions = decide(snapshot(FABRICS, jobs, quotas=[reserve(VISION, SPARE, limit=0)], live=observed))
    assert [(a.job_id, a.fabric_id) for a in decisions.admit] == [("vision-0", POOL)]


def test_a_named_gpu_type_goes_only_where_that_type_is():
    jobs = [replace(j, gpu_type="h100") for j in gpu_jobs(VISION, 1, queue=BOTH)]
    observed = {POOL: live(8, "a100"), SPARE: live(0, "h100", next_start_s=60)}
    decisions = decide(snapshot(FABRICS, jobs, live=observed))
    assert [(a.job_id, a.fabric_id) for a in decisions.admit] == [("vision-0", SPARE)]
    nowhere = [replace(j, gpu_type="l4") for j in gpu_jobs(VISION, 1, queue=BOTH)]
    assert not decide(snapshot(FABRICS, nowhere, live=observed)).admit


def test_the_workload_page_words_say_where_and_when_per_target():
    (job,) = gpu_jobs(VISION, 1, queue=BOTH)
    snap = snapshot(FABRICS, [job], live={POOL: live(0, next_start_s=600), SPARE: live(8)})
    when, why = expected_start(snap, job, POOL)
    assert when == NOW + timedelta(seconds=600)
    assert "pool is full now (0 GPUs free)" in why
    assert expected_start(snap, job, SPARE) == (NOW, "spare has room for it now (8 GPUs free)")


def running_on(fid: int, name: str, gpus_n: int, started_min_ago: int, limit_min: int) -> Job:
    started = NOW - timedelta(minutes=started_min_ago)
    return Job(name, FRAUD, BOTH, gpus(gpus_n), fabric_id=fid, started_at=started, runtime_limit_s=limit_min * 60)


# Both fabrics declared with 16 GPUs: Gridlane's ledger has room on each, others fill the rest (live: 0 free).
ROOMY = [fabric(POOL, 16), fabric(SPARE, 16)]
ENDS_LATE = running_on(POOL, "fraud-pool", 4, started_min_ago=10, limit_min=240)  # ends at 15:50
ENDS_SOON = running_on(SPARE, "fraud-spare", 4, started_min_ago=50, limit_min=60)  # ends at 12:10


def test_with_both_full_and_no_estimate_work_waits_where_gridlanes_running_work_ends_first():
    jobs = gpu_jobs(VISION, 1, queue=BOTH)
    observed = {POOL: live(0), SPARE: live(0)}
    placed = decide(snapshot(ROOMY, jobs, [ENDS_LATE, ENDS_SOON], live=observed)).admit
    assert [(a.job_id, a.fabric_id) for a in placed] == [("vision-0", SPARE)]
    # and the other way round: the queue's first target when its work ends first
    early, late = replace(ENDS_LATE, runtime_limit_s=15 * 60), replace(ENDS_SOON, runtime_limit_s=600 * 60)
    placed = decide(snapshot(ROOMY, jobs, [early, late], live=observed)).admit
    assert [(a.job_id, a.fabric_id) for a in placed] == [("vision-0", POOL)]


def test_the_fabrics_own_estimate_still_goes_before_gridlanes():
    jobs = gpu_jobs(VISION, 1, queue=BOTH)
    observed = {POOL: live(0, next_start_s=3 * 3600), SPARE: live(0)}
    placed = decide(snapshot(ROOMY, jobs, [ENDS_LATE, ENDS_SOON], live=observed)).admit
    assert [(a.job_id, a.fabric_id) for a in placed] == [("vision-0", POOL)]


def test_a_learned_runtime_makes_gridlanes_estimate_sooner():
    jobs = gpu_jobs(VISION, 1, queue=BOTH)
    observed = {POOL: live(0), SPARE: live(0)}
    hour = replace(ENDS_SOON, started_at=NOW)  # ends at 13:00
    by_limits = snapshot(ROOMY, jobs, [ENDS_LATE, hour], live=observed)
    assert [(a.job_id, a.fabric_id) for a in decide(by_limits).admit] == [("vision-0", SPARE)]
    learned = {shape_of(ENDS_LATE): 20 * 60}  # the pool's running shape really runs 20 minutes: ends at 12:10
    snap = replace(by_limits, expected_runtimes=learned)
    assert [(a.job_id, a.fabric_id) for a in decide(snap).admit] == [("vision-0", POOL)]


def test_the_reason_names_where_gridlane_expects_it_to_start_and_when():
    (job,) = gpu_jobs(VISION, 1, queue=BOTH)
    snap = snapshot(ROOMY, [job], [ENDS_LATE, ENDS_SOON], live={POOL: live(0), SPARE: live(0)})
    when, why = expected_start(snap, job, SPARE)
    assert when == NOW + timedelta(minutes=10)
    assert why == (
        "spare is full now (0 GPUs free) and gives no estimate; by the runtime limits of Gridlane's work running "
        "there, Gridlane expects it to start there by 12:10 UTC"
    )
    assert expected_start(snap, job, POOL)[0] == NOW + timedelta(hours=3, minutes=50)
    alone = snapshot(ROOMY, [job], [], live={POOL: live(0), SPARE: live(0)})
    assert expected_start(alone, job, SPARE) == (None, "spare is full now (0 GPUs free) and gives no estimate")
