"""Array elements and native work: the % limit of an array, and work that runs only on fabrics of its kind."""

from __future__ import annotations

from dataclasses import replace

from scheduler import decide
from scheduler import reasons as r
from tests.scheduler.shapes import BOTH, POOL, SPARE, VISION, fabric, gpu_jobs, queues, running_on, snapshot


def elements(n: int, throttle: int, *, array: str = "sweep") -> list:
    return [replace(j, array_id=array, array_throttle=throttle) for j in gpu_jobs(VISION, n, 0.25, name=array)]


def test_an_array_never_holds_more_than_its_limit_whatever_is_free():
    decisions = decide(snapshot([fabric(POOL, 8)], elements(20, 5)))
    assert [a.job_id for a in decisions.admit] == [f"sweep-{i}" for i in range(5)]
    waiting = {w.job_id: w.reason for w in decisions.waiting}
    assert len(waiting) == 15
    assert all(reason.code == r.ARRAY_THROTTLE for reason in waiting.values())
    assert "at most 5 elements at once" in waiting["sweep-5"].message


def test_elements_already_running_count_against_the_limit_and_other_arrays_are_apart():
    pending = elements(20, 5)
    running = [replace(j, array_id="sweep", array_throttle=5) for j in running_on(POOL, elements(3, 5, array="old"))]
    other = elements(4, 2, array="other")
    decisions = decide(snapshot([fabric(POOL, 8)], pending[3:] + other, running))
    admitted = [a.job_id for a in decisions.admit]
    assert admitted.count("sweep-3") + admitted.count("sweep-4") == 2
    assert sum(1 for a in admitted if a.startswith("sweep-")) == 2
    assert sum(1 for a in admitted if a.startswith("other-")) == 2


def test_an_array_without_a_limit_is_admitted_as_capacity_allows():
    decisions = decide(snapshot([fabric(POOL, 2)], elements(20, 0)))
    assert len(decisions.admit) == 8  # eight quarters of a GPU on two GPUs


def test_native_work_goes_only_to_fabrics_of_its_kind_in_its_queue():
    (job,) = gpu_jobs(VISION, 1, 1, queue=BOTH)
    decisions = decide(snapshot([fabric(POOL, 8), fabric(SPARE, 8)], [replace(job, only_on=(SPARE,))]))
    assert [(a.job_id, a.fabric_id) for a in decisions.admit] == [(job.id, SPARE)]
    nowhere = decide(snapshot([fabric(POOL, 8)], [replace(job, only_on=())], queues=queues()))
    assert [w.reason.code for w in nowhere.waiting] == [r.NO_TARGET]
