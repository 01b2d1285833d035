"""An array's elements reach Slurm as one sbatch (`--array=`), each element `<job id>_<index>`, and a worker that
died anywhere in between finds every element's job instead of submitting it again. The fabric's own scripts run in
a local bash against stand-ins for Slurm's commands (tests/fabrics/slurm/fake.py); what Slurm does with them is
test_arrays_live.py's."""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from fabrics.base import FabricError, JobSpec, JobState, Resources, place_many
from fabrics.slurm import parse
from fabrics.ssh import batch
from fabrics.ssh.transport import Result
from tests.fabrics.slurm.conftest import job
from tests.fabrics.slurm.fake import FakeCluster


@pytest.fixture
def cluster(tmp_path: Path) -> FakeCluster:
    return FakeCluster(tmp_path / "login")


def elements(n: int, *, array: str = "", first: int = 0, **overrides: object) -> list[JobSpec]:
    array = array or str(uuid.uuid4())
    return [
        job(
            'echo "$SLURM_ARRAY_TASK_ID $GRIDLANE_ARRAY_INDEX"',
            array=str(i),
            array_id=array,
            env={"GRIDLANE_ARRAY_INDEX": str(i), "GRIDLANE_ARRAY_ID": array},
            **overrides,
        )
        for i in range(first, first + n)
    ]


def fresh(jobs: list[JobSpec]) -> list[uuid.UUID]:
    return [j.workload_id for j in jobs]


def test_a_thousand_elements_are_one_sbatch_in_one_round_trip_and_each_element_is_jobid_index(cluster):
    jobs = elements(1000)
    placed = place_many(cluster.fabric, jobs, fresh=fresh(jobs))
    (sbatch,) = cluster.calls("sbatch")
    assert "--array=0-999" in sbatch
    (tag,) = [arg for arg in sbatch if arg.startswith("--comment=")]
    assert re.fullmatch(r"--comment=gridlane:[0-9a-f-]{36}", tag)  # the group's tag, not one element's
    assert len(cluster.ssh.scripts) == 1
    assert not cluster.calls("squeue")  # nothing was ever sent for fresh work: no look-up
    assert placed == {j.workload_id: f"100_{j.array}" for j in jobs}
    script = cluster.jobs()["100"]["script"]
    assert f"#SBATCH --job-name=gl-{jobs[0].array_id}" in script
    assert "#SBATCH --output=.gridlane/%A_%a.out" in script
    assert f"\n7) export GRIDLANE_WORKLOAD_ID={jobs[7].workload_id} GRIDLANE_ARRAY_INDEX=7 ;;\n" in script
    assert script.count(f"GRIDLANE_ARRAY_ID={jobs[0].array_id}") == 1  # shared: exported once


def test_indexes_go_as_slurms_ranges_and_each_element_runs_its_own_environment(cluster, tmp_path):
    jobs = [j for j in elements(12) if j.array not in ("3", "7", "8")]
    placed = place_many(cluster.fabric, jobs, fresh=fresh(jobs))
    assert "--array=0-2,4-6,9-11" in cluster.calls("sbatch")[0]
    script = cluster.jobs()["100"]["script"]
    for index in ("4", "11"):
        ran = cluster.ssh.run(["env", f"SLURM_ARRAY_TASK_ID={index}", "bash", "-c", script])
        assert ran.stdout == f"{index} {index}\n"
    stray = cluster.ssh.run(["env", "SLURM_ARRAY_TASK_ID=3", "bash", "-c", script])
    assert stray.status == 1
    assert "no element 3" in stray.stderr
    assert placed[jobs[3].workload_id] == "100_4"


def test_other_arrays_and_elements_whose_scripts_differ_go_as_sbatches_of_their_own(cluster):
    one, other = elements(3), elements(2)
    bigger = elements(2, array=one[0].array_id, first=3, per_node=Resources(0, 2000, 256))
    jobs = one + other + bigger
    placed = place_many(cluster.fabric, jobs, fresh=fresh(jobs))
    arrays = sorted(next(a for a in call if a.startswith("--array=")) for call in cluster.calls("sbatch"))
    assert arrays == ["--array=0-1", "--array=0-2", "--array=3-4"]
    assert len({job_id.split("_")[0] for job_id in placed.values()}) == 3
    assert len(cluster.ssh.scripts) == 1  # still one round trip


def test_a_group_past_max_array_tasks_is_split_and_an_index_past_max_array_size_is_refused(tmp_path):
    cluster = FakeCluster(tmp_path / "login", max_array_size=20, max_array_tasks=8)
    jobs = elements(21)
    placed = place_many(cluster.fabric, jobs, fresh=fresh(jobs))
    arrays = sorted((next(a for a in call if a.startswith("--array=")) for call in cluster.calls("sbatch")), key=len)
    assert sorted(arrays) == ["--array=0-7", "--array=16-19", "--array=8-15"]
    refused = placed[jobs[20].workload_id]
    assert isinstance(refused, FabricError)
    assert not refused.retryable
    assert "MaxArraySize (20)" in str(refused)


def test_a_worker_that_died_after_sbatch_before_the_records_finds_every_element_and_submits_none_again(cluster):
    jobs = elements(10)
    # The script dies right after sbatch printed the group's job id: no element's record was written.
    cluster.ssh.run_script = _dying_after_sbatch(cluster)
    with pytest.raises(KeyError):
        place_many(cluster.fabric, jobs, fresh=fresh(jobs))
    del cluster.ssh.run_script  # back to the transport's own
    assert len(cluster.calls("sbatch")) == 1
    # The retry (not fresh: the workloads were dispatching) gets another subset first, then the rest.
    first = place_many(cluster.fabric, jobs[:4])
    rest = place_many(cluster.fabric, jobs[4:])
    assert first | rest == {j.workload_id: f"100_{j.array}" for j in jobs}
    assert len(cluster.calls("sbatch")) == 1  # none submitted twice
    assert cluster.fabric.find_many([j.workload_id for j in jobs]) == first | rest


def test_an_sbatch_that_never_printed_its_id_is_found_by_squeue_per_element(cluster):
    jobs = elements(5)
    cluster.sbatch_mode("silent")  # slurmctld took the array; sbatch died before it printed the job id
    lost = place_many(cluster.fabric, jobs, fresh=fresh(jobs))
    assert all(isinstance(outcome, FabricError) for outcome in lost.values())
    cluster.sbatch_mode("")
    found = place_many(cluster.fabric, jobs)  # a retry asks squeue -r by the array's job name
    assert found == {j.workload_id: f"100_{j.array}" for j in jobs}
    assert len(cluster.calls("sbatch")) == 1
    (lookup,) = cluster.calls("squeue")
    assert "-r" in lookup
    assert f"--name=gl-{jobs[0].array_id}" in lookup


def test_a_retry_with_another_subset_submits_only_the_elements_without_a_job(cluster):
    jobs = elements(10)
    cluster.sbatch_mode("refuse")
    refused = place_many(cluster.fabric, jobs, fresh=fresh(jobs))
    assert all(isinstance(o, FabricError) and "Invalid partition" in str(o) for o in refused.values())
    cluster.sbatch_mode("")
    first = place_many(cluster.fabric, jobs[2:6])
    assert first == {j.workload_id: f"100_{j.array}" for j in jobs[2:6]}
    second = place_many(cluster.fabric, jobs)
    assert next(a for a in cluster.calls("sbatch")[-1] if a.startswith("--array=")) == "--array=0-1,6-9"
    assert second == first | {j.workload_id: f"101_{j.array}" for j in jobs[:2] + jobs[6:]}


def test_one_element_is_cancelled_alone_and_polled_by_its_own_id(cluster):
    jobs = elements(3)
    placed = place_many(cluster.fabric, jobs, fresh=fresh(jobs))
    cluster.set_state("100", 0, "RUNNING")
    cluster.fabric.cancel(str(placed[jobs[1].workload_id]))
    assert cluster.calls("scancel") == [["100_1"]]
    statuses = cluster.fabric.poll(["100_0", "100_1", "100_2", "100_7"])
    states = {job_id: status.state for job_id, status in statuses.items()}
    assert states == {
        "100_0": JobState.RUNNING, "100_1": JobState.CANCELLED, "100_2": JobState.QUEUED, "100_7": JobState.MISSING,
    }  # fmt: skip
    cluster.fabric.cancel("100_1; rm -rf ~")  # no such id: nothing runs
    assert cluster.calls("scancel") == [["100_1"]]


def test_an_elements_output_is_read_from_its_own_file(cluster):
    home = cluster.home
    (home / ".gridlane").mkdir()
    (home / ".gridlane" / "100_4.out").write_text("four\n")
    (home / ".gridlane" / "100_5.out").write_text("five\n")
    assert cluster.fabric.tail("100_4") == "four\n"


def test_a_group_step_needs_its_placeholder_once_and_its_members_in_order():
    member = batch.Member("gridlane:a", "ids/a", 1)
    with pytest.raises(ValueError, match="once"):
        batch.script([batch.Step(["sbatch"], stdin="x", key="gridlane:g", record="ids/g", members=[member])])
    twice = [member, batch.Member("gridlane:b", "ids/b", 1)]
    with pytest.raises(ValueError, match="order"):
        batch.script([batch.Step(["sbatch", batch.TASKS], stdin="x", key="gridlane:g", record="ids/g", members=twice)])


def test_array_elements_in_squeue_and_sacct_read_as_jobid_index():
    end, rec = parse.FIELD_END, parse.RECORD_END
    rest = ["RUNNING", "None", "0", "2026-12-01T10:00:00", "2026-12-01T10:00:05", "N/A", "node1", "cpu=1", "gl-a"]
    squeue = "".join(
        end.join([array_job, task, raw, *rest, "gridlane:g"]) + rec
        for array_job, task, raw in (("100", "3", "103"), ("100", "0-9", "100"), ("55", "N/A", "55"))
    )
    (element,) = parse.squeue_tasks(squeue)
    assert (element.job_id, element.status().state, element.host) == ("100_3", JobState.RUNNING, "node1")
    sacct = "\n".join(
        end.join([job_id, raw, "COMPLETED", "None", "3:0", "2026-12-01T10:00:00", "N/A", "N/A", "node1", "", "gl-a"])
        for job_id, raw in (("100_3", "103"), ("100_[4-9]", "100"), ("77", "77"))
    )
    (done,) = parse.sacct_tasks(sacct)
    assert (done.job_id, done.status().state, done.status().exit_code) == ("100_3", JobState.SUCCEEDED, 3)
    assert parse.submitted_id("100_3\n") == "100_3"


def _dying_after_sbatch(cluster: FakeCluster) -> Callable[..., Result]:
    """run_script as a login node that went down right after sbatch: the members' records are never written and
    the report never comes (the fabric then raises, as a worker killed there would stop)."""
    own = cluster.ssh.run_script

    def run(script: str, *, retry: bool = False, timeout: float | None = None) -> Result:
        cut = re.sub(r"^_gl_spread .*$", "exit 0", script, flags=re.M)
        own(cut, retry=retry, timeout=timeout)
        raise KeyError("the worker died")

    return run
