"""The sampler beside real jobs on this host, posting to a live portal, with a stand-in nvidia-smi on PATH.

Slurm and PBS: the script the fabric renders (sampler preamble included) is run by bash here, as the batch
system would run it on a node: the test cluster has no GPU, and what matters is the script's own behaviour
(the job's output and exit status untouched, the sampler gone when it ends). Local: a real local fabric job.
"""

from __future__ import annotations

import os
import shlex
import subprocess
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from fabrics.base import FabricConfig, JobState, Resources
from fabrics.local.fabric import LocalFabric
from fabrics.local.supervisor import GRACE_ENV
from fabrics.pbs import render as pbs_render
from fabrics.sampler import WATCH_ENV
from fabrics.slurm import render as slurm_render
from portal.accounts.models import ResourceGroup
from portal.queues.models import Fabric, Queue, QueueTarget
from portal.usage.models import UsageSample
from portal.worker.dispatch import job_spec
from portal.workloads.models import Workload
from portal.workloads.states import State
from tests.conftest import wait_until
from tests.usage import standin

COMMAND = "echo out; echo err >&2; sleep 3; exit 3"


@pytest.fixture
def portal(live_server: Any, settings: Any) -> Any:
    settings.GRIDLANE_PUBLIC_URL = live_server.url  # where the sampler posts
    settings.GRIDLANE_SAMPLE_SECONDS = 1.0
    settings.GRIDLANE_SAMPLE_MIN_INTERVAL_S = 0.0
    return live_server


def running_on(kind: str, alice: Any, submit: Any, **settings: Any) -> Workload:
    fabric = Fabric.objects.create(
        name=f"{kind}-sampled", kind=kind, gpus_milli=8000, cpus_milli=32000, memory_mib=64000, settings=settings
    )
    queue = Queue.objects.create(slug=f"q-{kind}", name=kind, kinds=["training"])
    queue.allowed_groups.add(*ResourceGroup.objects.all())
    QueueTarget.objects.create(queue=queue, fabric=fabric)
    workload = submit(alice, queue=queue.slug, kind="training", gpus=2, command=COMMAND)
    Workload.objects.filter(pk=workload.pk).update(state=State.RUNNING, fabric=fabric, external_id="7")
    return Workload.objects.select_related("owner", "group", "queue", "fabric", "target").get(pk=workload.pk)


def samplers_watching(pid: int) -> list[int]:
    """Processes of ours whose environment names `pid` as the job they sample beside."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            env = (entry / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if f"{WATCH_ENV}={pid}".encode() in env:
            found.append(int(entry.name))
    return found


def job_samples(w: Workload) -> list[float | None]:
    return list(
        UsageSample.objects.filter(workload=w, source=UsageSample.Source.JOB)
        .order_by("at")
        .values_list("gpu_utilisation", flat=True)
    )


def run_script(script: str, tmp_path: Path, path: str, **env: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "job.sh").write_text(script)
    process = subprocess.Popen(
        ["/bin/bash", str(tmp_path / "job.sh")],
        cwd=tmp_path,
        env={"PATH": path, "HOME": str(tmp_path), **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    out, err = process.communicate(timeout=120)
    # The sampler exits once the job's shell is gone (it checks every second).
    wait_until(lambda: not samplers_watching(process.pid), timeout=30)
    return subprocess.CompletedProcess(process.args, process.returncode, out, err)


def test_a_slurm_job_s_sampler_posts_changing_values_and_leaves_the_job_alone(alice, submit, portal, tmp_path):
    w = running_on("slurm", alice, submit)
    calls = standin.install(tmp_path / "bin", [[10, 20], [90, 96], [0, 0]])
    script = slurm_render.render("", job_spec(w), slurm_render.Options(), reveal=True)
    done = run_script(script, tmp_path, f"{tmp_path / 'bin'}:{os.environ['PATH']}")
    assert (done.returncode, done.stdout, done.stderr) == (3, "out\n", "err\n")
    seen = job_samples(w)
    assert len(seen) >= 2  # one at the start, then one a second while `sleep 3` ran
    assert seen[:2] == [15.0, 93.0]
    assert int(calls.read_text()) == len(seen)


def test_a_node_without_nvidia_smi_runs_no_sampler_and_the_workload_has_no_data(alice, submit, portal, tmp_path):
    w = running_on("slurm", alice, submit)
    script = slurm_render.render("", job_spec(w), slurm_render.Options(), reveal=True)
    assert "nvidia-smi" in script  # the sampler is there, and finds no tool
    bare = tmp_path / "bare"
    bare.mkdir()
    for tool in ("bash", "sleep", "python3"):  # what the job and the sampler would use, and no nvidia-smi
        (bare / tool).symlink_to(subprocess.check_output(["which", tool], text=True).strip())
    done = run_script(script, tmp_path, str(bare))
    assert (done.returncode, done.stdout, done.stderr) == (3, "out\n", "err\n")
    assert job_samples(w) == []


def test_a_pbs_job_keeps_its_output_and_exit_status_records_with_the_sampler_beside(alice, submit, portal, tmp_path):
    w = running_on("pbs", alice, submit)
    standin.install(tmp_path / "bin", [[50, 70]])
    options = pbs_render.Options()
    script = pbs_render.render("", job_spec(w), options, reveal=True)
    (tmp_path / options.workdir).mkdir()
    done = run_script(script, tmp_path, f"{tmp_path / 'bin'}:{os.environ['PATH']}", PBS_JOBID="7.server")
    records = tmp_path / options.workdir
    assert done.returncode == 3
    assert (records / "7.server.out").read_text() == "out\n"
    assert (records / "7.server.err").read_text() == "err\n"
    assert (records / "7.server.exit").read_text().strip() == "3"
    assert job_samples(w)[0] == 60.0


def test_the_record_copy_of_the_script_masks_the_secret_and_a_job_without_samples_has_no_sampler(alice, submit):
    w = running_on("slurm", alice, submit)
    spec = job_spec(w)
    recorded = slurm_render.render("", spec, slurm_render.Options())
    assert "_gl_sampler=" in recorded
    assert spec.env["GRIDLANE_ENDPOINT_SECRET"] not in recorded
    plain = slurm_render.render("", replace(spec, env={}), slurm_render.Options())
    assert "_gl_sampler" not in plain


def test_a_local_job_is_sampled_beside_its_command_and_ends_as_it_would_alone(
    alice, submit, portal, tmp_path, monkeypatch
):
    w = running_on("local", alice, submit, root=str(tmp_path / "jobs"))
    calls = standin.install(tmp_path / "bin", [[30, 40], [100, 100]])
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:{os.environ['PATH']}")  # the supervisor inherits it
    monkeypatch.setenv(GRACE_ENV, "0.3")
    fabric = LocalFabric(
        FabricConfig("local", "local", Resources(8000, 32000, 64000), {"root": str(tmp_path / "jobs")})
    )
    # The command lasts until the sampler has read the GPUs a third time (so the second reading is kept, however
    # slowly a busy machine starts the sampler), then ends as COMMAND does.
    count = shlex.quote(str(calls))
    until_read = (
        f'i=0; until [ "$(cat {count} 2>/dev/null || echo 0)" -ge 3 ] || [ $i -ge 1200 ]; '
        "do sleep 0.05; i=$((i + 1)); done"
    )
    spec = replace(job_spec(w), command=COMMAND.replace("sleep 3", until_read))
    external_id = fabric.submit(spec)
    status = wait_until(lambda: (s := fabric.poll([external_id])[external_id]).state.finished and s, timeout=60)
    assert (status.state, status.exit_code) == (JobState.FAILED, 3)
    assert fabric.tail(external_id).count("out") == 1
    child = int((fabric.root / external_id / "child.pid").read_text())
    assert samplers_watching(child) == []  # stopped by the supervisor before it recorded the end
    assert job_samples(w)[:2] == [35.0, 100.0]
