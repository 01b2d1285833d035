"""The real Slurm test cluster (tests/services/slurm/up.sh) and helpers shared by the Slurm and PBS tests.

Tests that need the cluster fail, never skip, when it is not up. Two xdist workers share it, so
every job is tagged with a fresh workload id and a test looks only at its own jobs. A test that
stops the controller takes the cluster lock exclusively; every other live test holds it shared.
"""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest

from fabrics.base import FabricConfig, JobSpec, JobStatus, Resources
from fabrics.slurm import parse
from fabrics.slurm.fabric import SlurmFabric

T = TypeVar("T")
REPO = Path(__file__).resolve().parents[3]
FIXTURES = Path(__file__).parent / "fixtures"


def state_dir() -> Path:
    return Path(os.environ.get("GRIDLANE_TEST_STATE", REPO / "var" / "test-services")) / "slurm"


@pytest.fixture(scope="session")
def cluster() -> dict[str, Any]:
    path = state_dir() / "connection.json"
    if not path.exists():
        pytest.fail(f"the Slurm test cluster is not up ({path} is missing): run tests/services/run.sh or make test")
    return dict(json.loads(path.read_text()))


def ssh_settings(cluster: dict[str, Any]) -> dict[str, Any]:
    return {key: cluster[key] for key in ("host", "port", "user", "known_hosts", "key_file")}


# The cluster is machine-wide (tests/services/slurm/common.sh keeps its records here), so its lock is too: a
# test run beside another must not stop the controller under the other's feet.
CLUSTER_RUNDIR = Path("/run/gridlane-slurm-test")


@pytest.fixture
def cluster_lock(request: pytest.FixtureRequest, cluster: dict[str, Any]) -> Iterator[None]:
    """Shared for live tests; exclusive for a test that also asks for `controller_outage`, across every test
    run on this machine."""
    exclusive = "controller_outage" in request.fixturenames
    with open(CLUSTER_RUNDIR / "cluster.lock", "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


@pytest.fixture
def people(cluster: dict[str, Any]) -> None:
    """The people jobs run as, their Slurm accounts and the sudoers rule (tests/services/slurm/people.sh), on
    whatever cluster is up now: another test run may have restarted it without them. Idempotent, and asked
    before each test that needs them (a restart drops slurmdbd's associations)."""
    subprocess.run(["bash", str(REPO / "tests/services/slurm/people.sh")], check=True, timeout=300)


def sacct_user_and_account(job_id: str) -> list[str]:
    """[user, account] of a job as slurmdbd recorded it (the cluster's node is this machine)."""
    out = subprocess.run(
        ["sacct", "-X", "-n", "-P", "-j", job_id, "-o", "User,Account"], capture_output=True, text=True, check=True
    ).stdout
    return out.strip().split("|")


@pytest.fixture
def slurm_settings(cluster: dict[str, Any]) -> dict[str, Any]:
    return ssh_settings(cluster) | {"partition": "cpu", "gpu_partition": "gpu"}


@pytest.fixture
def slurm(cluster_lock: None, slurm_settings: dict[str, Any]) -> Iterator[SlurmFabric]:
    fabric = SlurmFabric(FabricConfig("hpc", "slurm", Resources(8000, 32000, 64000), slurm_settings))
    yield fabric
    fabric.close()


def job(command: str = "true", **overrides: Any) -> JobSpec:
    fields: dict[str, Any] = {
        "workload_id": uuid.uuid4(),
        "name": "probe",
        "kind": "batch",
        "owner": "ada",
        "group": "ml",
        "queue": "hpc",
        "command": command,
        "per_node": Resources(0, 1000, 256),
        "runtime_limit_s": 300,
    }
    return JobSpec(**(fields | overrides))


def wait_for(check: Callable[[], T | None], what: str, timeout: float = 60.0, every: float = 0.5) -> T:
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(every)


def finished(fabric: Any, external_id: str, timeout: float = 60.0) -> JobStatus:
    def status() -> JobStatus | None:
        current: JobStatus = fabric.poll([external_id])[external_id]
        return current if current.state.finished else None

    return wait_for(status, f"job {external_id} to finish", timeout)


def jobs_named(fabric: SlurmFabric, *workload_ids: uuid.UUID) -> dict[uuid.UUID, list[str]]:
    """Every job slurmctld and accounting hold for each workload, looked up independently of find."""
    names = {f"gl-{wid}": wid for wid in workload_ids}
    result: dict[uuid.UUID, set[str]] = {wid: set() for wid in workload_ids}
    squeue = fabric.ssh.run([*fabric._squeue(f"--name={','.join(names)}")])
    sacct = fabric.ssh.run([*fabric._sacct(f"--name={','.join(names)}", "--starttime=now-1days")])
    for found in (parse.squeue(squeue.stdout), parse.sacct(sacct.stdout)):
        for slurm_job in found:
            if slurm_job.name in names:
                result[names[slurm_job.name]].add(slurm_job.job_id)
    return {wid: sorted(ids) for wid, ids in result.items()}


def fabric_behind_queue(
    settings: dict[str, Any], *, groups: Any, template: str = "", kind: str = "slurm", **queue: Any
) -> Any:
    """A Slurm (or PBS) fabric `hpc` (8 GPUs, 32 CPUs), checked as the admin checks it, behind one queue of
    `groups`."""
    from portal.queues.models import Fabric, Queue, QueueTarget

    fabric = Fabric(
        name="hpc", kind=kind, gpus_milli=8000, cpus_milli=32000, memory_mib=64000, gpu_sharing=False,
        settings=settings,
    )  # fmt: skip
    fabric.full_clean()  # the settings pass SlurmFabric.check_settings, as in the admin
    fabric.save()
    made = Queue.objects.create(**queue)
    made.allowed_groups.add(*groups)
    QueueTarget.objects.create(queue=made, fabric=fabric, template=template)
    return fabric


@pytest.fixture
def mapped_hpc(cast: dict[str, Any], cluster_lock: None, people: None, slurm_settings: dict[str, Any]) -> Iterator[Any]:
    """A Slurm fabric `hpc` behind queue `hpc` that runs jobs as their owners (see `map_people`)."""
    from portal.accounts.models import ResourceGroup
    from portal.worker import connections

    connections.forget_all()
    fabric = fabric_behind_queue(
        slurm_settings, groups=ResourceGroup.objects.filter(slug__in=["vision", "fraud"]),
        slug="hpc", name="HPC", kinds=["training", "batch", "notebook"], default_runtime_minutes=10,
        max_runtime_minutes=60,
    )  # fmt: skip
    map_people(fabric)
    yield fabric
    connections.forget_all()


@pytest.fixture
def mapped_pbs(cast: dict[str, Any], cluster_lock: None, people: None, slurm_settings: dict[str, Any]) -> Iterator[Any]:
    """The same people on a PBS fabric behind queue `pbs`: the cluster's Torque wrappers, qsub with -A."""
    from portal.accounts.models import ResourceGroup
    from portal.worker import connections

    connections.forget_all()
    settings = {k: v for k, v in slurm_settings.items() if k not in ("partition", "gpu_partition")}
    fabric = fabric_behind_queue(
        settings | {"flavor": "torque", "queue": "cpu", "gpu_queue": "gpu"}, kind="pbs",
        groups=ResourceGroup.objects.filter(slug__in=["vision", "fraud"]), slug="pbs", name="PBS",
        kinds=["training", "batch"], default_runtime_minutes=10, max_runtime_minutes=60,
    )  # fmt: skip
    map_people(fabric)
    yield fabric
    connections.forget_all()


def map_people(fabric: Any) -> None:
    """Jobs on `fabric` run as their owners, by the claim preferred_username without its domain (see
    `signed_in`), charging vision's to gl-vision and fraud's to gl-fraud."""
    from portal.accounts.models import PosixPolicy, ResourceGroup, SchedulerAccount

    PosixPolicy.objects.create(fabric=fabric, claim="preferred_username", pattern=r"^(.*)@corp\.example$")
    for slug in ("vision", "fraud"):
        SchedulerAccount.objects.create(group=ResourceGroup.objects.get(slug=slug), fabric=fabric, account=f"gl-{slug}")


def signed_in(user: Any, name: str) -> None:
    """As a sign-in stores them: the claims that map `user` to the POSIX user `name` on `mapped_hpc`."""
    from portal.accounts.models import ExternalIdentity

    ExternalIdentity.objects.update_or_create(
        user=user,
        defaults={
            "issuer": "https://idp.test",
            "subject": name,
            "claims": {"preferred_username": f"{name}@corp.example"},
        },
    )
