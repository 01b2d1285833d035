"""Run as the person, on the real Slurm cluster with real sshd and real sudo (fabrics/ssh/runas.py).

alice (team vision) is gl-alice on the cluster with the Slurm account gl-vision; charlie (fraud) is
gl-charlie with gl-fraud (tests/services/slurm/people.sh). The portal's SSH account `gridlane` may run
sbatch, scancel, qsub, qdel (and mkdir and tail of job output) as them through sudo, and nothing else.
"""

from __future__ import annotations

import subprocess
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import pytest
from django.http import Http404

from fabrics.base import FabricError, JobState
from fabrics.slurm.fabric import SlurmFabric
from portal import access
from portal.queues.models import QueueTarget
from portal.worker import tasks
from portal.workloads import notebook_endpoint, services
from portal.workloads.models import Workload
from portal.workloads.states import State
from tests.conftest import wait_until
from tests.fabrics.slurm.conftest import (
    finished,
    job,
    sacct_user_and_account,
    signed_in,
    wait_for,
)
from tests.fabrics.slurm.test_notebook_live import TEMPLATE as NOTEBOOK_TEMPLATE
from tests.fabrics.slurm.test_worker import adapter, run_until

ALICE, CHARLIE, SYSTEM = "gl-alice", "gl-charlie", "gl-sys"


@pytest.fixture
def slurm_as(people: None, slurm: SlurmFabric) -> SlurmFabric:
    return slurm


def home(user: str) -> Path:
    import pwd

    return Path(pwd.getpwnam(user).pw_dir)


def as_user(user: str, *argv: str) -> subprocess.CompletedProcess[str]:
    """A command run on the cluster's node as `user` (the node is this machine), as that person would."""
    return subprocess.run(["runuser", "-u", user, "--", *argv], capture_output=True, text=True, timeout=60, cwd="/")


def over_ssh(fabric: SlurmFabric, *argv: str) -> Any:
    """A command run by the portal's own SSH account on the login node."""
    return fabric.ssh.run(list(argv))


def test_each_persons_job_runs_as_themselves_charged_to_their_team(slurm_as):
    made = f"made-{uuid.uuid4().hex[:8]}"
    command = f"id -un; touch {made}; pwd"
    jobs = {
        ALICE: job(command, run_as=ALICE, account="gl-vision"),
        CHARLIE: job(command, run_as=CHARLIE, account="gl-fraud"),
    }
    placed = slurm_as.place_many(list(jobs.values()))
    for user, spec in jobs.items():
        job_id = placed[spec.workload_id]
        assert isinstance(job_id, str), job_id
        status = finished(slurm_as, job_id)
        assert status.state is JobState.SUCCEEDED
        assert slurm_as.tail(job_id).split() == [user, str(home(user))]  # read back as its owner, through sudo
        assert home(user).joinpath(made).owner() == user
        assert home(user).joinpath(".gridlane", f"{job_id}.out").owner() == user
        squeue = as_user("gridlane", "squeue", "-h", "-t", "all", "-j", job_id, "-o", "%u|%a").stdout.strip()
        assert squeue in ("", f"{user}|{jobs[user].account}")  # "" once slurmctld has forgotten it
        assert sacct_user_and_account(job_id) == [user, jobs[user].account]
        assert slurm_as.find(spec.workload_id) == job_id  # found by its tag, whoever owns it


def test_one_person_cannot_cancel_anothers_job_but_gridlane_cancels_it_as_its_owner(slurm_as):
    spec = job("sleep 300", run_as=ALICE, account="gl-vision")
    job_id = slurm_as.submit(spec)
    wait_for(lambda: slurm_as.poll([job_id])[job_id].state is JobState.RUNNING, "alice's job to run")
    refused = as_user(CHARLIE, "scancel", job_id)
    assert "Access/permission denied" in refused.stderr
    assert slurm_as.poll([job_id])[job_id].state is JobState.RUNNING
    slurm_as.cancel(job_id)
    assert finished(slurm_as, job_id).state is JobState.CANCELLED


def test_the_submit_account_cannot_escape_the_sudoers_rule(slurm_as):
    for argv in (
        ["sudo", "-n", "-u", ALICE, "sh", "-c", "id"],  # a shell as the person
        ["sudo", "-n", "-u", ALICE, "/usr/bin/tail", "-c", "10", "--", "/etc/passwd"],  # a file outside .gridlane
        ["sudo", "-n", "-u", "root", "sbatch", "--version"],  # root, with an allowed command
        ["sudo", "-n", "-u", SYSTEM, "--", "true"],
    ):
        result = over_ssh(slurm_as, *argv)
        assert not result.ok, argv
        assert "sudo:" in result.stderr, (argv, result.stderr)


def test_a_system_account_an_unknown_user_and_a_bad_name_are_refused_and_nothing_runs(slurm_as):
    system, unknown, bad = job(run_as=SYSTEM), job(run_as="gl-nobody"), job(run_as="Robert'); rm -rf ~")
    placed = slurm_as.place_many([system, unknown, bad])
    for spec, said in (
        (system, "below 1000: a system account runs nothing for Gridlane"),
        (unknown, "there is no user gl-nobody on"),
        (bad, "is not a POSIX user name"),
    ):
        error = placed[spec.workload_id]
        assert isinstance(error, FabricError)
        assert not error.retryable
        assert said in str(error)
    assert slurm_as.find_many([system.workload_id, unknown.workload_id, bad.workload_id]) == {}


def test_a_sudo_refusal_is_a_final_error_never_a_job_as_the_submit_account(slurm_as):
    spec = job(run_as=ALICE, account="gl-vision")
    no_rule = SlurmFabric(slurm_as.config)
    # The same cluster with the rule's output directory renamed: sudo refuses mkdir of anything else.
    no_rule.options = type(slurm_as.options)(**{**slurm_as.options.__dict__, "workdir": ".elsewhere"})
    try:
        error = no_rule.place_many([spec])[spec.workload_id]
    finally:
        no_rule.close()
    assert isinstance(error, FabricError)
    assert not error.retryable
    assert "may not run this as the person (sudo: a password is required)" in str(error)
    assert slurm_as.find(spec.workload_id) is None


def test_a_person_cannot_charge_another_teams_account(slurm_as):
    spec = job(run_as=ALICE, account="gl-fraud")
    error = slurm_as.place_many([spec])[spec.workload_id]
    assert isinstance(error, FabricError)
    assert "Invalid account" in str(error)


# --- Through the portal: identity mapping -> dispatch -> sudo sbatch ----------------------------------


def each_runs_as_its_owner(alice: Any, charlie: Any, submit: Any, queue: str) -> Any:
    """alice's and charlie's jobs on `queue` run as gl-alice and gl-charlie, charged to their teams' accounts;
    returns alice's workload."""
    signed_in(alice, ALICE)
    signed_in(charlie, CHARLIE)
    mine = submit(alice, queue=queue, command="id -un", memory_gb=1)
    theirs = submit(charlie, queue=queue, command="id -un", memory_gb=1)
    for workload, user, account in ((mine, ALICE, "gl-vision"), (theirs, CHARLIE, "gl-fraud")):
        run_until(workload, State.SUCCEEDED)
        assert workload.log_tail.strip() == user
        assert sacct_user_and_account(workload.external_id) == [user, account]
    return mine


def test_through_gridlane_no_job_runs_as_the_shared_account(alice, charlie, submit, mapped_hpc):
    mine = each_runs_as_its_owner(alice, charlie, submit, "hpc")
    with pytest.raises(Http404):  # nor can charlie reach alice's workload through Gridlane to cancel it
        access.access_workload(charlie, mine.pk)


def test_through_gridlane_a_pbs_queue_runs_each_job_as_its_owner_charged_with_minus_a(
    alice, charlie, submit, mapped_pbs
):
    """The same people on a PBS fabric (the cluster's Torque wrappers): qsub as each of them, with -A."""
    each_runs_as_its_owner(alice, charlie, submit, "pbs")


def test_through_gridlane_a_person_without_a_mapping_gets_the_plain_error(alice, submit, mapped_hpc):
    with pytest.raises(services.SubmitRejected) as refused:
        submit(alice, queue="hpc", command="true", memory_gb=1)
    assert refused.value.errors["queue"] == [
        "Jobs on HPC run under your own account on the cluster, but alice has no 'preferred_username' claim "
        "for hpc (sign in again, or ask IT)."
    ]


def test_a_notebook_on_slurm_runs_as_its_owner(alice, submit, mapped_hpc, live_server, settings):
    settings.GRIDLANE_PUBLIC_URL = live_server.url  # where the job reports
    QueueTarget.objects.filter(fabric=mapped_hpc).update(template=NOTEBOOK_TEMPLATE)
    signed_in(alice, ALICE)
    notebook: Workload = submit(alice, queue="hpc", kind="notebook", name="nb", command="", memory_gb=1)
    try:

        def linked() -> str:
            tasks.cycle()
            notebook.refresh_from_db()
            return notebook.connect_url

        wait_until(linked, timeout=120, every=0.5)
        server = notebook_endpoint.stored(notebook)
        assert server is not None
        status = urllib.request.Request(f"http://{server.host}:{server.port}{server.path}api/status",
                                        headers={"Authorization": f"token {server.token}"})  # fmt: skip
        with urllib.request.urlopen(status, timeout=10) as answer:
            assert answer.status == 200  # the server the job reported answers with its token
        owner = as_user("gridlane", "squeue", "-h", "-j", notebook.external_id, "-o", "%u").stdout.strip()
        assert owner == ALICE
        servers = subprocess.run(["ps", "-o", "args=", "-u", ALICE], capture_output=True, text=True).stdout
        assert "jupyter-server" in servers  # their Jupyter, in their home, under their uid
    finally:
        services.do_cancel(alice, notebook)
    run_until(notebook, State.CANCELLED)
    assert adapter(mapped_hpc).poll([notebook.external_id])[notebook.external_id].state is JobState.CANCELLED
