"""fabrics.base.place_many for fabrics with no `place_many` of their own (agents, Kubernetes, the local fabric):
a job whose tag was handed to the fabric before is looked up, and submitted only when the fabric has no job with
it; a fresh one (never handed over) is submitted without a look-up; a failed look-up submits nothing."""

from __future__ import annotations

import uuid
from typing import Any

from fabrics.base import FabricError, JobSpec, Resources, place_many


def spec(workload_id: uuid.UUID) -> JobSpec:
    return JobSpec(
        workload_id=workload_id, name="job", kind="batch", owner="alice", group="vision", queue="train",
        command="true", per_node=Resources(0, 1000, 1024),
    )  # fmt: skip


class Recording:
    """A fabric that already has a job for the workloads in `existing`, and records what it was asked."""

    def __init__(self, existing: dict[uuid.UUID, str], look_up_fails: bool = False) -> None:
        self.existing = existing
        self.look_up_fails = look_up_fails
        self.looked_up: list[list[uuid.UUID]] = []
        self.submitted: list[uuid.UUID] = []

    def find_many(self, workload_ids: Any) -> dict[uuid.UUID, str]:
        self.looked_up.append(list(workload_ids))
        if self.look_up_fails:
            raise FabricError("the fabric did not answer", retryable=True)
        return {w: self.existing[w] for w in workload_ids if w in self.existing}

    def submit_many(self, jobs: Any) -> dict[uuid.UUID, str]:
        self.submitted += [job.workload_id for job in jobs]
        return {job.workload_id: f"new-{job.workload_id}" for job in jobs}


def test_only_jobs_handed_over_before_are_looked_up_and_none_is_submitted_twice():
    fresh, sent_before, interrupted = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
    fabric = Recording({sent_before: "job-7"})
    placed = place_many(fabric, [spec(w) for w in (fresh, sent_before, interrupted)], fresh={fresh})  # type: ignore[arg-type]
    assert fabric.looked_up == [[sent_before, interrupted]]
    assert fabric.submitted == [fresh, interrupted]
    assert placed == {fresh: f"new-{fresh}", sent_before: "job-7", interrupted: f"new-{interrupted}"}


def test_a_dispatch_of_fresh_jobs_alone_looks_nothing_up():
    jobs = [uuid.uuid4() for _ in range(3)]
    fabric = Recording({})
    placed = place_many(fabric, [spec(w) for w in jobs], fresh=set(jobs))  # type: ignore[arg-type]
    assert fabric.looked_up == []
    assert fabric.submitted == jobs
    assert set(placed) == set(jobs)


def test_a_failed_look_up_is_every_jobs_outcome_and_nothing_is_submitted():
    fresh, sent_before = uuid.uuid4(), uuid.uuid4()
    fabric = Recording({}, look_up_fails=True)
    placed = place_many(fabric, [spec(fresh), spec(sent_before)], fresh={fresh})  # type: ignore[arg-type]
    assert fabric.submitted == []
    assert all(isinstance(outcome, FabricError) for outcome in placed.values())
    assert set(placed) == {fresh, sent_before}
