"""Slurm's output, captured from the real test cluster (fixtures/README.md), read into statuses."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from fabrics.base import JobState, Resources
from fabrics.slurm import parse, reasons
from tests.fabrics.slurm.conftest import FIXTURES


def by_name(fixture: str) -> dict[str, parse.SlurmJob]:
    """The newest job of each name in a captured squeue listing."""
    jobs = parse.squeue((FIXTURES / fixture).read_text())
    return {job.name: job for job in sorted(jobs, key=lambda j: int(j.job_id))}


STATES = by_name("squeue_states.txt")
FINISHED = by_name("squeue_finished.txt")


def test_every_captured_row_is_read_with_its_fields():
    jobs = parse.squeue((FIXTURES / "squeue_states.txt").read_text())
    assert len(jobs) == 33
    blocker = STATES["blocker"]
    assert (blocker.state, blocker.host, blocker.gpus) == ("RUNNING", "vm", 6)
    assert blocker.allocated["gres/gpu:a100"] in ("2", "4")
    assert blocker.started_at == datetime(2026, 11, 30, 2, 41, 15, tzinfo=UTC)


@pytest.mark.parametrize(
    ("name", "want_state", "want_exit"),
    [
        ("succeeded", JobState.SUCCEEDED, 0),
        ("failed", JobState.FAILED, 3),  # squeue's raw wait status 768
        ("killed", JobState.FAILED, 137),  # SIGKILL: 128 + 9
        ("cancelled", JobState.CANCELLED, 143),
        ("timeout", JobState.TIMED_OUT, 143),
        ("blocker", JobState.RUNNING, None),
        ("held", JobState.QUEUED, None),
    ],
)
def test_states_and_exit_codes_are_normalised(name, want_state, want_exit):
    status = FINISHED[name].status()
    assert (status.state, status.exit_code) == (want_state, want_exit)


@pytest.mark.parametrize(
    ("name", "want_reason"),
    [
        ("resources", "Waiting for the cluster to free the resources it asks for. [Slurm: Resources]"),
        ("priority", "Waiting behind jobs with higher priority on the cluster. [Slurm: Priority]"),
        ("held", "Held on the cluster by its submitter; it starts once released. [Slurm: JobHeldUser]"),
        ("dependency", "Waiting for the jobs it depends on to finish. [Slurm: Dependency]"),
        ("qos-waits", "Waiting: the cluster's QOS limit on GPUs per user"),
        ("not-avail", "Waiting: nodes it needs are down, drained or kept for jobs of partitions"),
    ],
)
def test_pending_reasons_read_as_sentences(name, want_reason):
    status = STATES[name].status()
    assert status.state is JobState.QUEUED
    assert status.reason.startswith(want_reason)


def test_slurms_own_estimate_becomes_the_estimated_start_of_a_waiting_job():
    resources = STATES["resources"].status()
    assert resources.estimated_start == datetime(2026, 11, 30, 2, 51, 15, tzinfo=UTC)
    assert resources.started_at is None
    assert STATES["held"].status().estimated_start is None  # a held job has no estimate


def test_a_finished_job_has_its_times_and_host():
    status = FINISHED["failed"].status()
    assert status.host == "vm"
    assert status.started_at is not None
    assert status.finished_at is not None
    assert status.finished_at >= status.started_at


def test_sacct_answers_with_exit_codes_from_the_text_form():
    jobs = {job.name: job for job in parse.sacct((FIXTURES / "sacct_finished.txt").read_text())}
    assert {name: (job.status().state, job.status().exit_code) for name, job in jobs.items()} == {
        "succeeded": (JobState.SUCCEEDED, 0),
        "failed": (JobState.FAILED, 3),
        "killed": (JobState.FAILED, 137),
        "cancelled": (JobState.CANCELLED, 0),
        "timeout": (JobState.TIMED_OUT, 0),
        "held": (JobState.QUEUED, None),
    }


def test_sacct_keeps_the_newest_record_when_a_cluster_reused_a_job_id():
    old = "7\x1fFAILED\x1fNone\x1f3:0\x1f2026-01-01T00:00:00\x1fUnknown\x1fUnknown\x1fvm\x1f\x1fold"
    new = "7\x1fCOMPLETED\x1fNone\x1f0:0\x1f2026-06-01T00:00:00\x1fUnknown\x1fUnknown\x1fvm\x1f\x1fnew"
    assert [job.name for job in parse.sacct(f"{new}\n{old}\n")] == ["new"]


def test_unknown_states_are_undetermined_and_rows_that_do_not_fit_are_dropped():
    row = "\x1f".join(["12", "REVOKED", "None", "0", "N/A", "N/A", "N/A", "n/a", "", "x", "(null)"]) + "\x1e"
    noise = "Welcome to the login node!\n"
    jobs = parse.squeue(noise + row + "\n13\x1fRUNNING\x1e\n")
    assert [job.job_id for job in jobs] == ["12"]
    assert jobs[0].status().state is JobState.UNDETERMINED
    assert "REVOKED" in jobs[0].status().reason


def test_sinfo_gives_capacity_per_partition_and_gpu_type():
    inventory = parse.sinfo((FIXTURES / "sinfo_busy.txt").read_text())
    assert [(p.name, p.default, p.usable_nodes) for p in inventory.partitions] == [("cpu", True, 1), ("gpu", False, 1)]
    gpu = inventory.partitions[1]
    assert gpu.gpu_types == {"a100": 4, "h100": 4}
    assert inventory.total == Resources(8000, 32000, 64000)  # the node counts once, though in two partitions
    assert inventory.free.gpus_milli == 0  # every GPU was taken when this was captured
    assert "gpu: 1/1 nodes up, 32 CPUs, 62 GiB, GPUs: 4 a100, 4 h100" in inventory.describe()


def test_a_drained_node_is_not_capacity():
    row = "\x1f".join(["n1", "gpu", "drained", "64", "0/0/64/64", "512000", "0", "gpu:h100:8", "gpu:h100:0"]) + "\x1e"
    inventory = parse.sinfo(row)
    assert inventory.total == Resources()
    assert inventory.partitions[0].usable_nodes == 0


@pytest.mark.parametrize(
    ("stdout", "want"), [("42\n", "42"), ("42;cluster1\n", "42"), ("warning: x\n43\n", "43"), ("", None)]
)
def test_sbatch_parsable_output(stdout, want):
    assert parse.submitted_id(stdout) == want


@pytest.mark.parametrize(
    ("code", "want"),
    [
        ("QOSMaxGRESPerUser", "Waiting: the cluster's QOS limit on GPUs per user"),
        ("QOSMaxCpuPerUserLimit", "Waiting: the cluster's QOS limit on CPUs per user"),
        ("AssocGrpGRES", "Waiting: the cluster's account group limit on GPUs is reached."),
        ("QOSGrpGRESRunMinutes", "Waiting: the cluster's QOS group limit on GPU-minutes is reached."),
        ("QOSMaxWallDurationPerJobLimit", "It asks for more run time per job than the cluster's QOS allows."),
        ("ReqNodeNotAvail, UnavailableNodes:n[01-02]", "Waiting: nodes it needs are down, drained or reserved."),
        ("BrandNewReason", "Waiting on the cluster: BrandNewReason."),
        ("None", ""),
    ],
)
def test_limit_reasons_are_read_by_their_parts(code, want):
    assert reasons.pending(code).startswith(want)


@pytest.mark.parametrize(
    ("stderr", "want", "want_retryable"),
    [
        (
            "sbatch: error: Batch job submission failed: Requested node configuration is not available",
            "no node of the cluster can ever hold this request",
            False,
        ),
        ("sbatch: error: Batch job submission failed: Invalid partition name specified", "no such partition", False),
        (
            "sbatch: error: Batch job submission failed: Unable to contact slurm controller (connect failure)",
            "Unable to contact slurm controller",
            True,
        ),
        ("bash: line 1: sbatch: command not found", "command not found", True),
    ],
)
def test_sbatch_refusals_read_for_people_and_say_whether_to_retry(stderr, want, want_retryable):
    message, retryable = reasons.submit_error(stderr)
    assert want in message
    assert retryable is want_retryable
