"""The GPU sampler in a real Slurm job on the test cluster, with a stand-in nvidia-smi on the job's PATH (the
cluster has no GPU): samples reach the live portal with the workload's secret, and the job's own output and
exit status are what they would be without it."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fabrics.base import JobState
from portal.accounts.models import ResourceGroup
from portal.queues.models import Fabric, Queue, QueueTarget
from portal.usage import samples
from portal.usage.models import UsageSample
from portal.workloads.models import Workload
from portal.workloads.states import State
from tests.conftest import wait_until
from tests.fabrics.slurm.conftest import finished, job
from tests.usage import standin


@pytest.fixture
def node_bin() -> Iterator[Path]:
    """A folder the cluster's account can read and write (the stand-in counts its calls there)."""
    path = Path(tempfile.mkdtemp(prefix="gridlane-standin-"))
    path.chmod(0o777)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_a_real_slurm_job_is_sampled_and_keeps_its_output_and_exit_status(
    slurm, alice, submit, live_server, settings, node_bin
):
    settings.GRIDLANE_PUBLIC_URL = live_server.url  # where the job's sampler posts
    settings.GRIDLANE_SAMPLE_SECONDS = 1.0
    settings.GRIDLANE_SAMPLE_MIN_INTERVAL_S = 0.0
    fabric = Fabric.objects.create(name="hpc-live", kind="slurm", gpus_milli=8000, cpus_milli=32000, memory_mib=64000)
    queue = Queue.objects.create(slug="hpc-live", name="HPC", kinds=["training"])
    queue.allowed_groups.add(*ResourceGroup.objects.all())
    QueueTarget.objects.create(queue=queue, fabric=fabric)
    w = submit(alice, queue="hpc-live", kind="training", gpus=1)
    Workload.objects.filter(pk=w.pk).update(state=State.RUNNING, fabric=fabric)
    w = Workload.objects.select_related("fabric").get(pk=w.pk)
    calls = standin.install(node_bin, [[12, 0], [88, 100], [40, 40]])
    calls.write_text("0\n")
    calls.chmod(0o666)  # the job's account counts its calls here (the umask would narrow a mode given at creation)
    env: dict[str, Any] = samples.job_env(w) | {"PATH": f"{node_bin}:{os.environ.get('PATH', '/usr/bin:/bin')}"}
    spec = job("echo out; echo err >&2; sleep 5; exit 3", workload_id=w.run_id, env=env)

    external_id = slurm.submit(spec)
    status = finished(slurm, external_id, timeout=120)

    assert (status.state, status.exit_code) == (JobState.FAILED, 3)
    tail = slurm.tail(external_id)
    assert tail.startswith("out\n")
    assert tail.endswith("--- stderr ---\nerr\n")

    def kept() -> list[float | None]:
        rows = UsageSample.objects.filter(workload=w, source=UsageSample.Source.JOB).order_by("at")
        return list(rows.values_list("gpu_utilisation", flat=True))

    seen = wait_until(lambda: len(kept()) >= 2 and kept(), timeout=30)  # one a second while `sleep 5` ran
    assert seen[:2] == [6.0, 94.0]
    assert int(calls.read_text()) >= len(seen)
