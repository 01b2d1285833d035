"""Route on the soonest start (scheduler/soonest.py): a queue over a busy shared fabric and one with room sends
work where it starts now; reservations, limits and gangs stay as they are."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

from fabrics.base import Resources
from fabrics.live import FreeNow, Node, from_nodes
from scheduler import decide
from scheduler.model import Job
from scheduler.soonest import expected_start
from tests.scheduler.shapes import BOTH, NOW, POOL, SPARE, VISION, fabric, gpu_jobs, reserve, snapshot

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
