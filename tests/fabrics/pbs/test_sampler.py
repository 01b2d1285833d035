"""A native PBS job's sampler, on the test cluster's PBS (Slurm's Torque wrappers): its qsub is Slurm's, so the
sampler joins the running job as on Slurm (srun --jobid --overlap, as its owner) and the job's readings reach
the portal. A PBS whose qsub is not Slurm's has no way in from outside the job (pbsdsh works only inside it): the
sampler does not start, and the reason names the missing piece, Gridlane's agent on the nodes."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.utils import timezone

from fabrics.base import FabricConfig, FabricError, JobState, Resources
from fabrics.pbs.fabric import PbsFabric
from portal.accounts.models import ResourceGroup
from portal.queues.models import Fabric, Queue, QueueTarget
from portal.usage.models import SamplerStart, UsageTurn
from portal.worker import samplers
from portal.workloads.models import Workload
from portal.workloads.states import State
from tests.conftest import wait_until
from tests.fabrics.slurm.conftest import finished, job

SCRIPT = "#!/bin/bash\n#PBS -N native-sampled\n#PBS -l nodes=1:ppn=1\n#PBS -l walltime=00:05:00\n"


@pytest.fixture
def pbs(cluster_lock: Any, slurm_settings: dict[str, Any]) -> Iterator[PbsFabric]:
    """The cluster's Torque wrappers as a PBS fabric (as tests.fabrics.pbs.test_pbs has it)."""
    settings = {k: v for k, v in slurm_settings.items() if k not in ("partition", "gpu_partition")}
    fabric = PbsFabric(FabricConfig("pbs", "pbs", Resources(8000, 32000, 64000), settings | {"flavor": "torque",
                                    "queue": "cpu", "gpu_queue": "gpu"}))  # fmt: skip
    yield fabric
    fabric.close()


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    """A folder the cluster's jobs can read and write (the cluster runs on this host)."""
    path = Path(tempfile.mkdtemp(prefix="gridlane-pbs-sampler-"))
    path.chmod(0o777)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def running_native(pbs: Any, alice: Any, submit: Any, settings: dict[str, Any], request: Any, shared: Path) -> Workload:
    """A native job whose batch script runs (it has said so in `shared`): a sampler on a node without GPUs reads
    the script's CPU time, so it needs the script's processes there."""
    fabric = Fabric.objects.create(
        name="pbs-native", kind="pbs", gpus_milli=8000, cpus_milli=32000, memory_mib=64000, settings=settings
    )
    queue = Queue.objects.create(slug="pbs-native", name="PBS", kinds=["training"])
    queue.allowed_groups.add(*ResourceGroup.objects.all())
    QueueTarget.objects.create(queue=queue, fabric=fabric)
    w = submit(alice, queue="pbs-native", kind="training", gpus=0)
    script = SCRIPT + f"touch {shared / 'running'}\nsleep 120\n"
    external_id = pbs.submit(job("", script=script, workload_id=w.run_id))
    request.addfinalizer(lambda: pbs.cancel(external_id))
    Workload.objects.filter(pk=w.pk).update(
        state=State.RUNNING, fabric=fabric, external_id=external_id, script=script, nodes=1, started_at=timezone.now()
    )
    wait_until(lambda: (shared / "running").exists(), timeout=60)
    return Workload.objects.get(pk=w.pk)


def test_a_native_pbs_job_on_slurm_s_torque_wrappers_is_sampled_inside_its_job(
    pbs, alice, submit, live_server, settings, request, shared_dir
):
    settings.GRIDLANE_PUBLIC_URL = live_server.url  # where the job's sampler posts
    settings.GRIDLANE_SAMPLE_SECONDS = 1.0
    settings.GRIDLANE_SAMPLE_BATCH = 1
    settings.GRIDLANE_SAMPLE_MIN_INTERVAL_S = 0.0
    w = running_native(pbs, alice, submit, pbs.config.settings, request, shared_dir)
    counts = samplers.step(timezone.now()) | {"summaries": 0}
    assert counts == {"started": 1, "unknown": 0, "retrying": 0, "summaries": 0}, SamplerStart.objects.get(
        workload=w
    ).reason
    # Its readings arrive from inside the job: the job's CPU time on its node (its processes, by SLURM_JOB_ID).
    wait_until(lambda: UsageTurn.objects.filter(workload=w, cpu_seconds__isnull=False).exists(), timeout=60)
    pbs.cancel(w.external_id)
    assert finished(pbs, w.external_id).state is JobState.CANCELLED


def test_a_pbs_whose_qsub_is_not_slurm_s_keeps_the_use_unknown_naming_the_agent(
    pbs, alice, submit, settings, shared_dir, request
):
    settings.GRIDLANE_PUBLIC_URL = "http://127.0.0.1:9"
    w = running_native(pbs, alice, submit, pbs.config.settings, request, shared_dir)
    (shared_dir / "qsub").write_text("#!/bin/sh\necho 'OpenPBS qsub'\n")  # another PBS's qsub, no srun beside it
    (shared_dir / "qsub").chmod(0o755)
    assert w.fabric_id is not None
    Fabric.objects.filter(pk=w.fabric_id).update(settings=pbs.config.settings | {"bin_dir": str(shared_dir)})
    counts = {"started": 0, "unknown": 1, "retrying": 0, "summaries": 0}  # final at once: no retry mends it
    assert samplers.step(timezone.now()) | {"summaries": 0} == counts
    start = SamplerStart.objects.get(workload=w)
    assert not start.started
    assert "pbsdsh works only inside the job" in start.reason
    assert start.reason.endswith("run Gridlane's agent with --pbs-jobs on its nodes to sample its jobs")
    assert not UsageTurn.objects.filter(workload=w).exists()
    assert pbs.poll([w.external_id])[w.external_id].state == JobState.RUNNING  # the job is left alone


def test_a_job_id_that_is_no_whole_job_is_refused_before_ssh(pbs):
    with pytest.raises(FabricError, match="numeric id"):
        pbs.start_sampler("42[1]", 1, {}, "secret")
