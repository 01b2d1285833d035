"""The CPU time of a job on its node, as the sampler reads it (fabrics.cputime): from a real cgroup v2 holding a
local job's process, and from the job's processes where there is no cgroup (Slurm's linux gatherer's way)."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from fabrics import cputime

# Burns `seconds` of CPU (process time, so a busy machine only makes it take longer), then waits for stdin.
BURN = "import sys, time\nt = time.process_time()\nwhile time.process_time() - t < {seconds}: pass\n"
UNIFIED = Path("/sys/fs/cgroup/unified")  # this machine's cgroup v2 (a hybrid layout); else /sys/fs/cgroup


def burner(seconds: float, wait: bool, **env: str) -> subprocess.Popen[bytes]:
    code = BURN.format(seconds=seconds) + ("print('burnt', flush=True)\nsys.stdin.read()\n" if wait else "")
    return subprocess.Popen([sys.executable, "-c", code], env=os.environ | env, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE)  # fmt: skip


@pytest.fixture
def job_cgroup() -> Iterator[Path]:
    """A job's cgroup as Slurm's task/cgroup lays it out: .../job_<id>/step_0, in the real cgroup v2."""
    root = UNIFIED if (UNIFIED / "cgroup.procs").exists() else Path("/sys/fs/cgroup")
    top = root / f"gridlane-test-{uuid.uuid4().hex[:8]}"
    step = top / "job_4242" / "step_0"
    step.mkdir(parents=True)
    yield step
    for folder in (step, step.parent, top):
        folder.rmdir()


def test_a_local_job_s_cpu_time_comes_from_its_real_cgroup(job_cgroup, tmp_path):
    job = burner(0.5, wait=False)
    (job_cgroup / "cgroup.procs").write_text(str(job.pid))  # the job's process, in the job's cgroup
    assert job.wait(timeout=120) == 0
    (tmp_path / "self").mkdir()
    relative = "/" + str(job_cgroup.relative_to(job_cgroup.parents[2]))
    (tmp_path / "self" / "cgroup").write_text(f"4:memory:/x\n0::{relative}\n")  # the sampler's own, in the job's
    roots = (str(job_cgroup.parents[2]),)
    seconds = cputime.cgroup_cpu_seconds("4242", proc=str(tmp_path), roots=roots)
    assert seconds is not None
    assert 0.5 <= seconds < 60  # an ended process's time stays counted
    assert cputime.cgroup_cpu_seconds("4243", proc=str(tmp_path), roots=roots) is None  # another job's: none
    assert cputime.job_cpu_seconds("4242", proc=str(tmp_path), roots=roots) == pytest.approx(seconds, abs=0.1)


def test_without_a_cgroup_the_job_s_own_processes_count_and_the_sampler_s_step_does_not():
    job_id = str(700000 + os.getpid() % 100000)
    work = burner(0.3, wait=True, SLURM_JOB_ID=job_id)
    sampler_step = burner(0.3, wait=True, SLURM_JOB_ID=job_id, SLURM_STEP_ID="9")
    try:
        for process in (work, sampler_step):
            assert process.stdout is not None
            assert process.stdout.readline() == b"burnt\n"
        seconds = cputime.processes_cpu_seconds(job_id, own_step="9")
        assert seconds is not None
        assert 0.3 <= seconds < 0.6  # the work's, not the sampler step's
        assert cputime.processes_cpu_seconds(job_id) == pytest.approx(seconds * 2, rel=0.5)
        assert cputime.job_cpu_seconds(job_id, "9", roots=()) == pytest.approx(seconds, abs=0.05)
        assert cputime.processes_cpu_seconds("1") is None  # no process of such a job
    finally:
        for process in (work, sampler_step):
            process.kill()
            process.wait()


def test_no_job_id_is_no_cpu_time():
    assert cputime.job_cpu_seconds("") is None
    assert cputime.job_cpu_seconds("12;rm") is None
