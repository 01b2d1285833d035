"""parse.py over real API responses (tests/k8s_double/fixtures): conditions and phases through the tables."""

from __future__ import annotations

import copy
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from fabrics.base import JobState, Resources
from fabrics.kubernetes import parse
from fabrics.kubernetes.settings import GpuResource

FIXTURES = Path(__file__).parents[2] / "k8s_double" / "fixtures"


def fixture(name: str) -> dict[str, Any]:
    return json.loads((FIXTURES / f"{name}.json").read_text())


def running_job() -> dict[str, Any]:
    job = fixture("job-failed-deadline")
    job["status"] = {"active": 1, "ready": 1, "startTime": "2024-11-05T09:20:11Z", "terminating": 0}
    return job


def test_a_complete_job_succeeded_with_exit_code_0_and_its_times():
    (job,) = fixture("job-list-complete")["items"]
    status = parse.job_status(job, [])
    assert status.state is JobState.SUCCEEDED
    assert status.exit_code == 0
    assert status.started_at == datetime(2024, 11, 5, 9, 12, 44, tzinfo=UTC)
    assert status.finished_at == datetime(2024, 11, 5, 9, 13, 31, tzinfo=UTC)


def test_a_job_past_its_deadline_timed_out():
    status = parse.job_status(fixture("job-failed-deadline"), [])
    assert status.state is JobState.TIMED_OUT
    assert status.finished_at == datetime(2024, 11, 5, 9, 20, 13, tzinfo=UTC)


def test_a_job_over_its_backoff_limit_failed_with_the_exit_code_of_its_pod():
    status = parse.job_status(fixture("job-failed-backoff"), [fixture("pod-failed")])
    assert status.state is JobState.FAILED
    assert status.exit_code == 3
    assert status.host == "gpu-node-2"
    assert status.reason == ""  # the worker words it from the exit code


def test_a_failure_without_a_pod_to_ask_keeps_the_jobs_message():
    status = parse.job_status(fixture("job-failed-backoff"), [])
    assert (status.state, status.exit_code) == (JobState.FAILED, None)
    assert status.reason == "Job has reached the specified backoff limit"


def test_an_out_of_memory_kill_says_so():
    pod = fixture("pod-failed")
    pod["status"]["containerStatuses"][0]["state"]["terminated"] |= {"exitCode": 137, "reason": "OOMKilled"}
    status = parse.job_status(fixture("job-failed-backoff"), [pod])
    assert status.reason == "ran out of memory (OOMKilled) (exit code 137)"


def test_the_first_rank_to_fail_gives_the_exit_code_not_the_ranks_stopped_after_it():
    first, killed = fixture("pod-failed"), fixture("pod-failed")
    killed["status"]["containerStatuses"][0]["state"]["terminated"] |= {
        "exitCode": 143,
        "finishedAt": "2024-11-05T09:22:09Z",
    }
    assert parse.job_status(fixture("job-failed-backoff"), [killed, first]).exit_code == 3


def test_a_suspended_kueue_job_waits_with_kueues_own_words():
    workload = {
        "status": {
            "conditions": [
                {"type": "QuotaReserved", "status": "False", "reason": "Pending", "message": "insufficient quota"}
            ]
        }
    }
    status = parse.job_status(fixture("job-suspended"), [], kueue_workload=workload)
    assert status.state is JobState.QUEUED
    assert status.reason == "waiting for Kueue to admit it from LocalQueue team-vision: insufficient quota"
    assert parse.job_status(fixture("job-suspended"), []).reason == (
        "waiting for Kueue to admit it from LocalQueue team-vision"
    )


def test_a_running_pod_makes_the_job_running_on_its_node():
    status = parse.job_status(running_job(), [fixture("pod-running")])
    assert status.state is JobState.RUNNING
    assert status.host == "gpu-node-1"
    assert status.endpoint is None  # a notebook's server reports itself to the portal (fabrics.ssh.notebook)


def test_an_image_that_cannot_be_pulled_is_a_readable_reason():
    status = parse.job_status(running_job(), [fixture("pod-image-pull-backoff")])
    assert status.state is JobState.QUEUED
    assert status.reason == (
        "the image registry.example.org/team/does-not-exist:1 cannot be pulled (the cluster keeps retrying): "
        'Back-off pulling image "registry.example.org/team/does-not-exist:1"'
    )


def test_an_unschedulable_pod_says_what_no_node_has():
    status = parse.job_status(running_job(), [fixture("pod-unschedulable")])
    assert status.state is JobState.QUEUED
    assert status.reason.startswith(
        "no node has room for it yet: 0/2 nodes are available: 2 Insufficient nvidia.com/gpu"
    )


def test_a_gang_held_by_volcano_says_so_first():
    podgroup = {"status": {"conditions": [{"type": "Unschedulable", "status": "True", "message": "2/2 tasks..."}]}}
    status = parse.job_status(running_job(), [fixture("pod-unschedulable")], podgroup=podgroup)
    assert status.reason == "Volcano has not scheduled the gang yet: 2/2 tasks..."


def test_a_pod_in_phase_unknown_is_undetermined():
    pod = fixture("pod-running")
    pod["status"]["phase"] = "Unknown"
    assert parse.job_status(running_job(), [pod]).state is JobState.UNDETERMINED


@pytest.mark.parametrize("phase", ["Zombie", "", None])
def test_a_phase_the_table_does_not_know_is_undetermined(phase):
    pod = fixture("pod-running")
    pod["status"]["phase"] = phase
    assert parse.job_status(running_job(), [pod]).state is JobState.UNDETERMINED


def test_a_condition_the_table_does_not_know_does_not_end_the_job():
    job = running_job()
    job["status"]["conditions"] = [{"type": "FailureTarget", "status": "True", "reason": "PodFailurePolicy"}]
    job["status"]["conditions"] += [{"type": "Complete", "status": "False"}]
    assert parse.job_status(job, [fixture("pod-running")]).state is JobState.RUNNING


def test_a_job_being_deleted_is_cancelled():
    job = running_job()
    job["metadata"]["deletionTimestamp"] = "2024-11-05T09:21:00Z"
    assert parse.job_status(job, [fixture("pod-running")]).state is JobState.CANCELLED


def test_no_pods_yet_means_queued_waiting_for_the_cluster():
    status = parse.job_status(running_job(), [])
    assert (status.state, status.reason) == (JobState.QUEUED, "waiting for the cluster to create its pods")


def test_the_log_pod_is_the_started_one():
    assert parse.log_pod([fixture("pod-unschedulable"), fixture("pod-running")]) == "sleepy-x5k2v"
    assert parse.log_pod([fixture("pod-unschedulable"), fixture("pod-image-pull-backoff")]) is None


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("500m", "0.5"),
        ("31850m", "31.85"),
        ("64Gi", str(64 * 2**30)),
        ("2113398200Ki", str(2113398200 * 1024)),
        ("8", "8"),
        ("1e3", "1000"),
        ("1.5", "1.5"),
        ("2M", "2000000"),
    ],
)
def test_quantities_read_as_the_api_writes_them(text, value):
    assert parse.quantity(text) == parse.quantity(value)


def test_a_quantity_that_is_not_one_is_an_error():
    with pytest.raises(ValueError, match="not a Kubernetes quantity"):
        parse.quantity("lots")


def test_capacity_is_allocatable_minus_other_peoples_live_pods():
    node = fixture("node")
    other = node | {"metadata": node["metadata"] | {"name": "gpu-node-2"}}
    notready = copy.deepcopy(node)
    notready["metadata"]["name"] = "broken"
    notready["status"]["conditions"][-1]["status"] = "False"
    theirs = fixture("pod-running")  # 1 GPU, 1 CPU, 1 GiB on gpu-node-1
    ours = copy.deepcopy(theirs)
    ours["metadata"]["labels"]["app.kubernetes.io/managed-by"] = "gridlane"
    done = fixture("pod-failed")
    total, detail = parse.capacity([node, other, notready], [theirs, ours, done], GpuResource())
    memory_mib = 2 * 2113398200 // 1024 - 1024
    assert total == Resources(16000 - 1000, 2 * 31850 - 1000, memory_mib)
    assert (
        detail
        == "2 of 3 nodes ready; 16 GPUs (nvidia.com/gpu) allocatable, 1 held by pods outside Gridlane, 1 by Gridlane's"
    )


def test_a_running_jobs_status_carries_its_running_pods_addresses() -> None:
    job = {"metadata": {"name": "gl-x"}, "spec": {}, "status": {"startTime": "2026-01-01T00:00:00Z"}}

    def pod(name: str, phase: str, **status: Any) -> dict[str, Any]:
        return {"metadata": {"name": name}, "spec": {"nodeName": "gpu-node-1"}, "status": {"phase": phase} | status}

    pods = [
        pod("a", "Running", podIP="10.244.1.7", podIPs=[{"ip": "10.244.1.7"}, {"ip": "fd00::7"}]),
        pod("b", "Running", podIP="10.244.1.8"),
        pod("c", "Pending"),
        pod("d", "Running", podIP="10.244.1.7"),
    ]
    status = parse.job_status(job, pods)
    assert status.state is JobState.RUNNING
    assert status.addresses == ("10.244.1.7", "fd00::7", "10.244.1.8")
    assert parse.job_status(job, [pod("c", "Pending")]).addresses == ()
