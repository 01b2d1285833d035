"""The PBS fabric: qsub scripts for PBS Pro and Torque, qstat -f read for both, and a live run through qsub."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from fabrics.base import FabricConfig, FabricError, JobSpec, JobState, Resources, TemplateError
from fabrics.pbs import parse
from fabrics.pbs.fabric import PbsFabric
from fabrics.pbs.render import Options, directives, job_name, render
from tests.fabrics.golden import assert_golden
from tests.fabrics.slurm.conftest import finished, job, sacct_user_and_account, wait_for

HERE = Path(__file__).parent
WORKLOAD = uuid.UUID("3f2a9c0d-1e4b-4c57-9a6e-0123456789ab")


def spec(**overrides: Any) -> JobSpec:
    fields: dict[str, Any] = {
        "workload_id": WORKLOAD,
        "name": "llama-ft",
        "kind": "training",
        "owner": "alice",
        "group": "vision",
        "queue": "hpc-train",
        "command": "python train.py --epochs 3",
        "per_node": Resources(2000, 16000, 65536),
        "nodes": 2,
        "runtime_limit_s": 4 * 3600 + 30,
    }
    return JobSpec(**(fields | overrides))


@pytest.mark.parametrize(
    ("golden", "options"),
    [
        ("pbspro.pbs", Options(flavor="pro", queue="workq", gpu_queue="gpu")),
        ("torque.pbs", Options(flavor="torque", workdir="/scratch/gridlane")),
    ],
)
def test_qsub_scripts_match_their_golden_files(golden, options):
    assert_golden(HERE / "golden" / golden, render("", spec(env={"WANDB_MODE": "offline"}), options))


def test_each_dialect_asks_for_nodes_cpus_gpus_memory_and_walltime_its_own_way():
    job = spec(per_node=Resources(1000, 4000, 2048), nodes=2, runtime_limit_s=90)
    assert directives(job, Options(flavor="pro")) == [
        f"#PBS -N {job_name(WORKLOAD)}",
        "#PBS -l select=2:ncpus=4:ngpus=1:mem=2048mb",
        "#PBS -l walltime=00:01:30",
    ]
    assert directives(job, Options(flavor="torque", queue="batch")) == [
        f"#PBS -N {job_name(WORKLOAD)}",
        "#PBS -q batch",
        "#PBS -l nodes=2:ppn=4:gpus=1,mem=4096mb,walltime=00:01:30",  # Torque's mem is for the whole job
    ]
    assert job_name(WORKLOAD) == "g3f2a9c0d1e4b4c"  # 15 characters: Torque keeps no more


@pytest.mark.parametrize(
    ("template", "complaint"),
    [
        ("#!/bin/bash\n#PBS -N mine\n$command\n", "names the job"),
        ("#!/bin/bash\n#PBS -o out.txt\n$command\n", "names the job"),
        ("#!/bin/bash\necho hi\n#PBS -q fast\n$command\n", "qsub ignores it"),
        ("#!/bin/bash\n#PBS -A $group\n$command\n", "inside a comment"),
    ],
)
def test_check_template_refuses_what_would_break_the_tag_or_the_quoting(template, complaint):
    with pytest.raises(TemplateError, match=complaint):
        PbsFabric.check_template(template)


def read(name: str) -> dict[str, parse.PbsJob]:
    return {job.job_id: job for job in parse.qstat_full((HERE / "fixtures" / name).read_text())}


def test_pbs_pro_qstat_f_is_read_with_its_wrapped_values():
    jobs = read("qstat_f_pbspro.txt")
    assert list(jobs) == [
        "4711.pbsserver",
        "4712.pbsserver",
        "4713.pbsserver",
        "4700.pbsserver",
        "4701.pbsserver",
        "4702.pbsserver",
    ]
    running = jobs["4711.pbsserver"]
    assert running.attributes["Variable_List"].endswith("PBS_O_QUEUE=gpu,PBS_O_HOST=login1.hpc.example.org")
    assert "PBS_O_LOGNAME=gridlane," in running.attributes["Variable_List"]  # "gr" + "idlane" across the wrap
    assert running.attributes["comment"].endswith("mem=16777216kb)")
    status = running.status()
    assert (status.state, status.host) == (JobState.RUNNING, "gpu017")
    assert status.started_at == datetime(2026, 11, 30, 9, 13, 1, tzinfo=UTC)


@pytest.mark.parametrize(
    ("job_id", "want_state", "want_exit", "want_reason"),
    [
        ("4712.pbsserver", JobState.QUEUED, None, "PBS says: Not Running: Insufficient amount of resource: ngpus"),
        ("4713.pbsserver", JobState.QUEUED, None, "Held by PBS"),
        ("4700.pbsserver", JobState.FAILED, 3, ""),
        ("4701.pbsserver", JobState.TIMED_OUT, -29, "PBS stopped it at its walltime"),
        ("4702.pbsserver", JobState.FAILED, 143, ""),  # 271 = 256 + SIGTERM
    ],
)
def test_pbs_pro_states_exit_statuses_and_reasons(job_id, want_state, want_exit, want_reason):
    status = read("qstat_f_pbspro.txt")[job_id].status()
    assert (status.state, status.exit_code) == (want_state, want_exit)
    assert status.reason.startswith(want_reason)


def test_pbs_pros_estimated_start_becomes_the_estimate():
    status = read("qstat_f_pbspro.txt")["4712.pbsserver"].status()
    assert status.estimated_start == datetime(2026, 11, 30, 13, 55, 1, tzinfo=UTC)


def test_torque_qstat_f_is_read():
    jobs = read("qstat_f_torque.txt")
    done = jobs["88231.head.hpc.example.org"].status()
    assert (done.state, done.exit_code, done.host) == (JobState.SUCCEEDED, 0, "node07,node08")  # both its hosts
    assert done.started_at == datetime(2026, 11, 30, 10, 2, 13, tzinfo=UTC)
    assert done.finished_at == datetime(2026, 11, 30, 10, 2, 18, tzinfo=UTC)
    assert jobs["88232.head.hpc.example.org"].status().state is JobState.RUNNING
    killed = jobs["88233.head.hpc.example.org"]
    assert killed.status(cancelled=True).state is JobState.CANCELLED  # Gridlane's own qdel left its marker
    assert killed.status().state is JobState.FAILED


def test_the_slurm_wrappers_qstat_f_is_read_and_its_missing_exit_status_comes_from_the_jobs_record():
    jobs = {job.name: job for job in read("qstat_f_slurm_wrapper.txt").values()}
    assert jobs["blocker"].status().state is JobState.RUNNING
    assert jobs["held"].status().state is JobState.QUEUED
    failed = jobs["failed"]
    assert failed.state == "C"
    assert failed.exit_status is None  # the wrapper prints none
    assert failed.status(exit_file=3).exit_code == 3
    assert failed.status().reason == "PBS kept no exit status for it"


@pytest.mark.parametrize(("stdout", "want"), [("1013\n", "1013"), ("4711.pbsserver\n", "4711.pbsserver"), ("", None)])
def test_qsub_output(stdout, want):
    assert parse.submitted_id(stdout) == want


@pytest.fixture
def pbs(cluster_lock, slurm_settings) -> Iterator[PbsFabric]:
    settings = slurm_settings | {"flavor": "torque", "queue": "cpu", "gpu_queue": "gpu"}
    settings = {k: v for k, v in settings.items() if k not in ("partition", "gpu_partition")}
    fabric = PbsFabric(FabricConfig("pbs", "pbs", Resources(8000, 32000, 64000), settings))
    yield fabric
    fabric.close()


def test_a_job_goes_through_qsub_runs_and_reports_its_exit_code_output_and_gpus(pbs):
    ok = job('echo "hello $PBS_JOBID gpus=$CUDA_VISIBLE_DEVICES"; echo warn >&2', per_node=Resources(1000, 1000, 256))
    bad = job("exit 3")
    submitted = pbs.submit_many([ok, bad])
    assert pbs.find_many([ok.workload_id, bad.workload_id, uuid.uuid4()]) == submitted
    fresh = job("true")
    placed = pbs.place_many([ok, bad, fresh])  # a dispatch resumed after a crash: one round trip, no second job
    assert {wid: placed[wid] for wid in submitted} == submitted
    assert isinstance(placed[fresh.workload_id], str)
    assert placed[fresh.workload_id] not in submitted.values()
    ok_id, bad_id = submitted[ok.workload_id], submitted[bad.workload_id]
    assert isinstance(ok_id, str)
    assert isinstance(bad_id, str)
    assert (finished(pbs, ok_id).state, finished(pbs, bad_id).exit_code) == (JobState.SUCCEEDED, 3)
    assert pbs.tail(ok_id) == f"hello {ok_id} gpus=0\n--- stderr ---\nwarn\n"


def test_qdel_cancels_a_pbs_job(pbs):
    external_id = pbs.submit(job("sleep 300"))
    wait_for(lambda: pbs.poll([external_id])[external_id].state is JobState.RUNNING, "the job to start")
    pbs.cancel(external_id)
    assert finished(pbs, external_id).state is JobState.CANCELLED
    assert pbs.capacity().healthy


def test_a_users_own_qsub_script_goes_through_qsub_as_written_with_the_queue_forced(pbs):
    script = (
        "#!/bin/bash\n#PBS -N pbs-native\n#PBS -l nodes=1:ppn=2\n#PBS -l walltime=00:05:00\n#PBS -q cpu\n"
        'echo "name=$SLURM_JOB_NAME queue=$SLURM_JOB_PARTITION cpus=$SLURM_CPUS_ON_NODE id=$GRIDLANE_WORKLOAD_ID"\n'
    )
    spec = job("", script=script, forced={"queue": "gpu"})
    assert pbs.render(spec) == script
    external_id = pbs.submit(spec)
    finished(pbs, external_id)
    written = pbs.ssh.run(["cat", f".gridlane/{spec.workload_id}.pbs"]).stdout
    assert written == script  # qsub read the file as the user wrote it
    # The job's own output, where qsub puts it without -o: <script>.o<job id> in the directory qsub ran in.
    out = f"{spec.workload_id}.pbs.o{external_id}"
    said = wait_for(lambda: pbs.ssh.run(["cat", out]).stdout, "the job's own output file")
    assert said.strip() == f"name=pbs-native queue=gpu cpus=2 id={spec.workload_id}"


def test_a_native_script_that_does_not_read_is_refused_before_qsub(pbs):
    with pytest.raises(TemplateError, match="line 2: -Y is not a qsub option"):
        pbs.render(job("", script="#!/bin/bash\n#PBS -Y\nx\n"))


def test_qsub_charges_the_teams_project_with_minus_a(pbs, people):
    external_id = pbs.submit(job("true", account="gl-vision"))
    assert finished(pbs, external_id).state is JobState.SUCCEEDED
    assert sacct_user_and_account(external_id) == ["gridlane", "gl-vision"]


def test_a_persons_pbs_job_runs_as_them_charged_to_their_team_and_reports_its_exit_and_output(pbs, people):
    ok = job("id -un; pwd", run_as="gl-alice", account="gl-vision")
    bad = job("echo failing >&2; exit 3", run_as="gl-charlie", account="gl-fraud")
    placed = pbs.place_many([ok, bad])
    ok_id, bad_id = placed[ok.workload_id], placed[bad.workload_id]
    assert isinstance(ok_id, str), ok_id
    assert isinstance(bad_id, str), bad_id
    assert pbs.find_many([ok.workload_id, bad.workload_id]) == placed  # crash-safe as before
    assert pbs.place_many([ok, bad]) == placed  # a dispatch resumed after a crash submits nothing twice
    assert finished(pbs, ok_id).state is JobState.SUCCEEDED
    assert finished(pbs, bad_id).exit_code == 3  # read from charlie's own record, as charlie
    assert sacct_user_and_account(ok_id) == ["gl-alice", "gl-vision"]
    assert sacct_user_and_account(bad_id) == ["gl-charlie", "gl-fraud"]
    alice_home = pbs.ssh.run(["getent", "passwd", "gl-alice"]).stdout.split(":")[5]
    assert pbs.tail(ok_id) == f"gl-alice\n{alice_home}\n"  # its output, in alice's own .gridlane
    assert pbs.tail(bad_id) == "--- stderr ---\nfailing\n"
    # Nothing of the person's job sits in the submit account's folder but the records Gridlane keeps.
    assert pbs.ssh.run(["ls", f".gridlane/{ok.workload_id}.pbs"]).status != 0
    assert pbs.ssh.run(["cat", f".gridlane/{ok_id}.owner"]).stdout == "gl-alice\n"


def test_qdel_cancels_a_persons_pbs_job_as_its_owner(pbs, people):
    external_id = pbs.submit(job("sleep 300", run_as="gl-alice", account="gl-vision"))
    wait_for(lambda: pbs.poll([external_id])[external_id].state is JobState.RUNNING, "the job to start")
    pbs.cancel(external_id)
    assert finished(pbs, external_id).state is JobState.CANCELLED


@pytest.mark.parametrize(
    ("user", "said"),
    [
        ("gl-sys", "below 1000: a system account runs nothing for Gridlane"),
        ("gl-nobody-here", "there is no user gl-nobody-here"),
        ("Root;rm", "is not a POSIX user name Gridlane runs as"),
    ],
)
def test_a_pbs_job_for_a_system_unknown_or_bad_user_is_refused_never_run_as_anyone(pbs, people, user, said):
    spec = job("true", run_as=user)
    error = pbs.place_many([spec])[spec.workload_id]
    assert isinstance(error, FabricError)
    assert not error.retryable
    assert said in str(error)
    assert pbs.find_many([spec.workload_id]) == {}


def test_a_persons_job_needs_the_workdir_the_sudoers_rule_names(cluster_lock, slurm_settings):
    settings = {k: v for k, v in slurm_settings.items() if k not in ("partition", "gpu_partition")}
    fabric = PbsFabric(FabricConfig("pbs", "pbs", Resources(), settings | {"flavor": "torque", "workdir": "jobs"}))
    spec = job("true", run_as="gl-alice")
    error = fabric.place_many([spec])[spec.workload_id]
    assert isinstance(error, FabricError)
    assert "which the sudoers rule names" in str(error)
    fabric.close()
