"""Taking a waiting PBS job back (the pull-back's cancel, portal/worker/pullback.py) through the Slurm test
cluster's Torque wrappers: a job that waits is held, then deleted, and reads cancelled without ever having had a
node; a job that runs is left running."""

from __future__ import annotations

from fabrics.base import JobState, Resources
from fabrics.pbs.fabric import PbsFabric
from tests.fabrics.pbs.test_pbs import pbs
from tests.fabrics.slurm.conftest import finished, job, wait_for

__all__ = ["pbs"]  # the fixture this module borrows


def test_a_waiting_job_is_taken_back_and_never_started_a_running_one_stays(pbs: PbsFabric) -> None:
    filler = pbs.submit(job("sleep 300", per_node=Resources(8000, 1000, 256)))  # every GPU of the gpu queue
    try:
        wait_for(lambda: pbs.poll([filler])[filler].state is JobState.RUNNING, "the filler to start", timeout=120)
        waiting = pbs.submit(job("echo should-never-run", per_node=Resources(1000, 1000, 256)))
        assert pbs.poll([waiting])[waiting].state is JobState.QUEUED
        pbs.take_back(waiting)
        status = finished(pbs, waiting)
        assert (status.state, status.host, status.started_at) == (JobState.CANCELLED, "", None)
        assert pbs.tail(waiting) == ""  # it wrote nothing: it never ran
        pbs.take_back(filler)  # it runs: it stays, and no hold is left on it
        assert pbs.poll([filler])[filler].state is JobState.RUNNING
    finally:
        pbs.cancel(filler)
    assert finished(pbs, filler).state is JobState.CANCELLED
