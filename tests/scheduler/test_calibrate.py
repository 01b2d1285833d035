"""Learned runtimes: estimates use them where history supports them, admissions never do, and on a replayed
history they beat the runtime-limit estimate."""

from __future__ import annotations

from datetime import timedelta

from scheduler import decide
from scheduler.calibrate import Learner, replay, summary, tier_limit
from scheduler.estimates import MIN_HISTORY, band, expected_runtime, learned_runtime, shape_of
from scheduler.simulate import Item, Task
from tests.scheduler.shapes import NOW, POOL, VISION, fabric, gpu_jobs, running_on, snapshot


def test_learned_runtime_needs_history_and_stays_under_the_limit() -> None:
    assert learned_runtime([600.0] * (MIN_HISTORY - 1), 3600) is None
    assert learned_runtime([100.0, 200.0, 300.0, 400.0, 500.0], 3600) == 400  # the 75th percentile
    assert learned_runtime([9000.0] * MIN_HISTORY, 3600) == 3600  # never beyond the limit
    job = gpu_jobs(VISION, 1, runtime_s=3600)[0]
    assert expected_runtime(job, {}) == 3600
    assert expected_runtime(job, {shape_of(job): 900}) == 900
    assert expected_runtime(job, {shape_of(job): 7200}) == 3600
    other = gpu_jobs(VISION, 1, 2, runtime_s=3600)[0]  # another shape: its limit
    assert expected_runtime(other, {shape_of(job): 900}) == 3600


def test_band_is_the_central_errors_and_holds_the_estimate() -> None:
    assert band([60.0] * 4) is None
    low, high = band([float(e) for e in range(-100, 1001)]) or (0, 0)
    assert -100 < low < 0 < 900 < high <= 1000
    assert band([300.0] * 10) == (0, 300)  # always late by 5 minutes: the band still holds the estimate itself


def test_an_estimate_uses_the_learned_runtime_and_admissions_do_not() -> None:
    """A 4-GPU pool full of one-hour-limit work that really runs ten minutes: the waiting job's estimate comes
    from the learned runtime; what is admitted is the same either way."""
    running = running_on(POOL, gpu_jobs(VISION, 4, runtime_s=3600, name="busy"), started_s_ago=0)
    pending = gpu_jobs(VISION, 2, runtime_s=3600, name="next")
    plain = decide(snapshot([fabric(POOL, 4)], pending, running))
    learned = {shape_of(running[0]): 600}
    taught = decide(snapshot([fabric(POOL, 4)], pending, running, expected_runtimes=learned))
    assert taught.admit == plain.admit == ()
    by_id = {w.job_id: w for w in plain.waiting}
    for w in taught.waiting:
        assert w.reason == by_id[w.job_id].reason
        before = by_id[w.job_id].estimated_start
        assert w.estimated_start is not None
        assert before is not None
        assert w.estimated_start < before
    assert {w.job_id: w.estimated_start for w in taught.waiting}["next-0"] == NOW + timedelta(seconds=600 - 3)


def test_a_run_past_its_learned_runtime_is_expected_at_its_limit() -> None:
    running = running_on(POOL, gpu_jobs(VISION, 1, 4, runtime_s=3600, name="long"), started_s_ago=1200)
    pending = gpu_jobs(VISION, 1, runtime_s=3600, name="next")
    learned = {shape_of(running[0]): 600}
    taught = decide(snapshot([fabric(POOL, 4)], pending, running, expected_runtimes=learned))
    assert taught.waiting[0].estimated_start == NOW + timedelta(seconds=3600 - 1200)


def test_limits_are_round_tiers_above_the_runtime() -> None:
    assert [tier_limit(Task("t", 0, r, 1000, 0)) for r in (1, 3600, 3601, 20000, 90000, 40 * 86400)] == [
        3600, 3600, 4 * 3600, 86400, 7 * 86400, 60 * 86400,
    ]  # fmt: skip


def test_the_learner_forgets_runs_older_than_its_window() -> None:
    job = gpu_jobs(VISION, 1, runtime_s=3600)[0]
    learner = Learner()
    for i in range(MIN_HISTORY):
        learner.finished(Item(job, 0.0, 300.0), 1000.0 + i, 300.0)
    assert learner.at(2000.0) == {shape_of(job): 300}
    assert learner.at(1000.0 + 31 * 86400) == {}


def small_history() -> list[Task]:
    """One team on a 2-GPU pool: one-GPU tasks that run 5 to 15 minutes under a one-hour limit, arriving faster
    than they finish, so that most wait."""
    tasks = []
    for i in range(120):
        runtime = 300.0 + (i * 37) % 600
        tasks.append(Task(f"t{i:03}", arrival=i * 240.0, runtime=runtime, gpus_milli=1000, group=0))
    return tasks


def test_a_learned_runtime_beats_the_limit_on_a_replayed_history() -> None:
    tasks = small_history()
    by_limit = replay(tasks, learned=False, groups=1, gpus=2)
    learned = replay(tasks, learned=True, groups=1, gpus=2)
    assert learned.starts == by_limit.starts  # the same decisions: only the estimates differ
    assert len(learned.last) == len(by_limit.last) > 20
    ours, theirs = summary(learned), summary(by_limit)
    assert theirs["median_abs_error_s"] > 600  # a limit-based estimate is off by most of the hour
    assert ours["median_abs_error_s"] <= 0.5 * theirs["median_abs_error_s"]
    assert ours["first_median_abs_error_s"] < theirs["first_median_abs_error_s"]
    assert 0 < learned.inside <= learned.banded
