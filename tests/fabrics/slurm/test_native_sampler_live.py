"""A user's own two-node script on the real test cluster, sampled from outside it: once its job runs, the worker's
samplers step adds the sampler as a step of the job (srun --jobid --overlap, on both nodes, as the job's owner).
A stand-in nvidia-smi shows four GPUs per node, with different use per GPU and node; the job holds two on each.
Samples arrive from both nodes, for the job's GPUs only; the job's output and exit status are byte for byte
those of the same script sent with plain sbatch."""

from __future__ import annotations

import shlex
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.utils import timezone

from fabrics.base import JobState
from portal.accounts.models import ResourceGroup
from portal.queues.models import Fabric, Queue, QueueTarget
from portal.usage.models import SamplerStart, UsageGpuSample, UsageSample, UsageTurn
from portal.worker import samplers
from portal.workloads.models import Workload
from portal.workloads.states import State
from tests.conftest import wait_until
from tests.fabrics.slurm.conftest import finished, job
from tests.usage import standin

NODE2 = "gl-node2"  # tests/services/slurm/common.sh


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    """A folder the cluster's account can read and write: the stand-in, the release file, the outputs."""
    path = Path(tempfile.mkdtemp(prefix="gridlane-native-sampler-"))
    path.chmod(0o777)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def user_script(shared: Path) -> str:
    """The user's script: two nodes, two GPUs on each, a task per node; it runs until the test releases it (a
    file), then fails with 3. Its output names no job id, so two runs print the same bytes."""
    out = shlex.quote(str(shared / "out-%j.txt"))
    release = shlex.quote(str(shared / "release"))
    return (
        "#!/bin/bash\n"
        "#SBATCH --partition=multi\n#SBATCH --nodes=2\n#SBATCH --ntasks-per-node=1\n#SBATCH --gres=gpu:2\n"
        f"#SBATCH --output={out}\n#SBATCH --error={out}\n"
        'echo "GPUs here: $CUDA_VISIBLE_DEVICES"\n'
        "srun bash -c 'echo \"task on $(hostname -s)\"' | sort\n"
        f"i=0; until [ -e {release} ] || [ $i -ge 1200 ]; do sleep 0.1; i=$((i + 1)); done\n"
        'echo "done" >&2\n'
        "exit 3\n"
    )


def sacct_state(slurm: Any, job_id: str) -> str:
    result = slurm.ssh.run(["sacct", "-X", "-n", "-P", "-j", job_id, "-o", "State,ExitCode"], retry=True)
    return str(result.stdout.strip())


def test_a_native_two_node_job_is_sampled_on_both_nodes_for_its_gpus_only_and_ends_as_plain_sbatch_ends_it(
    slurm, slurm_settings, cluster, alice, submit, live_server, settings, shared_dir, request
):
    settings.GRIDLANE_PUBLIC_URL = live_server.url  # where the job's sampler posts
    settings.GRIDLANE_SAMPLE_SECONDS = 1.0
    settings.GRIDLANE_SAMPLE_BATCH = 1
    settings.GRIDLANE_SAMPLE_MIN_INTERVAL_S = 0.0
    head = cluster["node"]
    standin.install_per_node(shared_dir / "bin", {head: [10, 20, 95, 96], NODE2: [70, 80, 97, 98]})
    (shared_dir / "bin").chmod(0o755)
    fabric = Fabric.objects.create(
        name="hpc-native", kind="slurm", gpus_milli=10000, cpus_milli=48000, memory_mib=96000,
        settings=slurm_settings | {"gpu_tools_path": str(shared_dir / "bin")},
    )  # fmt: skip
    queue = Queue.objects.create(slug="hpc-native", name="HPC", kinds=["training"])
    queue.allowed_groups.add(*ResourceGroup.objects.all())
    QueueTarget.objects.create(queue=queue, fabric=fabric)
    script = user_script(shared_dir)
    w = submit(alice, queue="hpc-native", kind="training", gpus=2)

    external_id = slurm.submit(job(script=script, workload_id=w.run_id, command=""))
    request.addfinalizer(lambda: slurm.cancel(external_id))  # a failed check leaves no job waiting for its release
    Workload.objects.filter(pk=w.pk).update(
        state=State.RUNNING, fabric=fabric, external_id=external_id, script=script, nodes=2, started_at=timezone.now()
    )
    wait_until(lambda: slurm.poll([external_id])[external_id].state == JobState.RUNNING, timeout=60)
    assert samplers.step(timezone.now()) | {"summaries": 0} == {
        "started": 1,
        "unknown": 0,
        "retrying": 0,
        "summaries": 0,
    }
    assert SamplerStart.objects.get(workload=w).started
    assert samplers.due() == []  # once per run

    def seen() -> set[tuple[str, int, float | None]]:
        return set(UsageGpuSample.objects.filter(workload=w).values_list("node", "gpu", "utilisation"))

    wait_until(lambda: {n for n, _, _ in seen()} == {head, NODE2}, timeout=60)
    assert seen() == {(head, 0, 10.0), (head, 1, 20.0), (NODE2, 0, 70.0), (NODE2, 1, 80.0)}
    per_node = dict(UsageSample.objects.filter(workload=w).values_list("node", "gpu_utilisation").distinct())
    assert per_node == {head: 15.0, NODE2: 75.0}
    # The batch script's node reads the job's CPU time there (its processes: no cgroup on this cluster).
    wait_until(lambda: UsageTurn.objects.filter(workload=w, cpu_seconds__isnull=False).exists(), timeout=60)
    (shared_dir / "release").touch()
    status = finished(slurm, external_id, timeout=120)
    assert (status.state, status.exit_code) == (JobState.FAILED, 3)

    plain = slurm.ssh.run(["sbatch", "--parsable"], stdin=script).stdout.strip()  # already released: ends at once
    wait_until(lambda: sacct_state(slurm, plain).startswith("FAILED"), timeout=120)
    sampled_out = (shared_dir / f"out-{external_id}.txt").read_bytes()
    assert sampled_out == (shared_dir / f"out-{plain}.txt").read_bytes()
    assert b"task on " + head.encode() in sampled_out
    assert b"task on " + NODE2.encode() in sampled_out
    assert sacct_state(slurm, external_id) == sacct_state(slurm, plain) == "FAILED|3:0"


def test_a_sampler_that_cannot_start_leaves_the_use_unknown_with_the_reason(
    slurm, slurm_settings, alice, submit, settings
):
    settings.GRIDLANE_PUBLIC_URL = "http://127.0.0.1:9"
    fabric = Fabric.objects.create(
        name="hpc-gone", kind="slurm", gpus_milli=8000, cpus_milli=32000, memory_mib=64000, settings=slurm_settings
    )
    queue = Queue.objects.create(slug="hpc-gone", name="HPC", kinds=["training"])
    queue.allowed_groups.add(*ResourceGroup.objects.all())
    QueueTarget.objects.create(queue=queue, fabric=fabric)
    w = submit(alice, queue="hpc-gone", kind="training", gpus=1)
    ended = slurm.submit(job("true", workload_id=uuid.uuid4()))
    finished(slurm, ended)
    Workload.objects.filter(pk=w.pk).update(
        state=State.RUNNING, fabric=fabric, external_id=ended, script="#!/bin/bash\ntrue\n", started_at=timezone.now()
    )

    # srun's step ends at once: tried again, a bounded number of times, then its reason stays.
    at = timezone.now()
    tried = [samplers.step(at + timedelta(hours=h)) for h in range(samplers.MAX_TRIES)]
    assert [t["retrying"] for t in tried] == [1] * (samplers.MAX_TRIES - 1) + [0]
    assert tried[-1]["unknown"] == 1
    assert samplers.due(at + timedelta(days=1)) == []
    start = SamplerStart.objects.get(workload=w)
    assert not start.started
    assert start.reason.endswith(f"(after {samplers.MAX_TRIES} tries)")
    assert start.reason != samplers.STARTING
    assert not UsageSample.objects.filter(workload=w, source=UsageSample.Source.JOB).exists()
