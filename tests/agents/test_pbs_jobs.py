"""The agent samples the native PBS jobs on its own node (where PBS's qsub is not Slurm's, nothing else can join
them): each job's processes by PBS_JOBID, its GPUs by the CUDA_VISIBLE_DEVICES PBS gave them (read through a
stand-in nvidia-smi), its CPU time from its cgroup, else its processes; the portal keeps the readings as the
running PBS workload's with that job id on the agent's host, and marks its sampler started."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from fabrics.agent import pbs_jobs
from fabrics.agent.client import ApiError
from portal.queues.models import Fabric
from portal.usage.models import SamplerStart, UsageGpuSample, UsageSample
from portal.workloads.models import Workload
from portal.workloads.states import State
from tests.agents.test_api import bearer
from tests.agents.test_gpus import fake_nvidia_smi
from tests.agents.test_sampling import stat
from tests.conftest import wait_until

JOB = "4321.pbs-server"
# index, name, memory.total, memory.used, utilization.gpu: the job holds GPUs 1 and 3 of the node's four
SMI = ("0, NVIDIA H100 80GB HBM3, 81559, 70000, 99\n1, NVIDIA H100 80GB HBM3, 81559, 1000, 10\n"
       "2, NVIDIA H100 80GB HBM3, 81559, 70000, 98\n3, NVIDIA H100 80GB HBM3, 81559, 3000, 30\n")  # fmt: skip


class Clock:
    now = 100.0

    def __call__(self) -> float:
        return self.now


def process(proc: Path, pid: int, env: dict[str, str], cgroup: str = "0::/user.slice\n", ticks: int = 0) -> None:
    (proc / str(pid)).mkdir(parents=True)
    (proc / str(pid) / "environ").write_bytes(b"\0".join(f"{k}={v}".encode() for k, v in env.items()) + b"\0")
    (proc / str(pid) / "stat").write_text(stat(pid, pid, ticks, 0, 100))
    (proc / str(pid) / "cgroup").write_text(cgroup)


def test_a_native_job_s_gpus_come_from_what_pbs_gave_it_and_its_cpu_from_its_cgroup(tmp_path):
    proc, root = tmp_path / "proc", tmp_path / "cgroup"
    job_cgroup = "/pbs_jobs.service/jobid/" + JOB
    process(proc, 10, {"PBS_JOBID": JOB, "CUDA_VISIBLE_DEVICES": "1,3"}, f"0::{job_cgroup}\n")
    process(proc, 11, {"PBS_JOBID": JOB, "CUDA_VISIBLE_DEVICES": "1,3"}, f"0::{job_cgroup}\n")
    process(proc, 20, {"PBS_JOBID": "77.pbs-server"}, ticks=50)  # no cgroup of its own, no GPUs given
    process(proc, 30, {"HOME": "/root"})  # not a PBS job's
    (root / job_cgroup.lstrip("/")).mkdir(parents=True)
    cpu_stat = root / job_cgroup.lstrip("/") / "cpu.stat"
    cpu_stat.write_text("usage_usec 10000000\nuser_usec 9000000\n")
    clock = Clock()
    sampler = pbs_jobs.Sampler(nvidia_smi=str(fake_nvidia_smi(tmp_path, SMI)), proc=proc, roots=(str(root),),
                               clock=clock, cpus=lambda job: 4 if job.job_id == JOB else 1)  # fmt: skip
    first = sampler.sample()
    assert set(first) == {JOB, "77.pbs-server"}
    assert first[JOB]["gpu_utilisation"] == 20  # GPUs 1 and 3 (10 % and 30 %), not the node's busy 0 and 2
    assert first[JOB]["gpu_memory_mib"] == 4000
    assert first[JOB]["gpus"] == [{"index": 1, "utilisation": 10.0, "memory_mib": 1000},
                                  {"index": 3, "utilisation": 30.0, "memory_mib": 3000}]  # fmt: skip
    assert "gpus" not in first["77.pbs-server"]  # unknown: not said, never the node's
    assert first[JOB]["cpu_utilisation"] is None  # one reading of its CPU time: no rate yet
    assert first["77.pbs-server"]["gpu_utilisation"] is None  # no GPUs given: unknown, never the node's
    clock.now += 10
    cpu_stat.write_text("usage_usec 30000000\n")  # 20 s of CPU in 10 s, on its 4 CPUs: 50 %
    (proc / "20" / "stat").write_text(stat(20, 20, 50 + 5 * os.sysconf("SC_CLK_TCK"), 0, 100))  # 5 s in 10 s: 50 %
    second = sampler.sample()
    assert second[JOB]["cpu_utilisation"] == pytest.approx(50)
    assert second["77.pbs-server"]["cpu_utilisation"] == pytest.approx(50)


UUID = "GPU-5fd4d5e6-7b1a-4f35-9d6b-3c2d1e0f9a81"


@pytest.mark.parametrize(
    ("given", "want"),
    [({"1", "3"}, [1, 3]), (set(), []), ({UUID, "3"}, [2, 3]), ({"GPU-not-on-this-node"}, None)],
)
def test_gpus_given_by_index_or_uuid_and_none_given_is_none_held(given, want):
    assert pbs_jobs.gpu_indexes(pbs_jobs.NativeJob(JOB, [1], given, ungpued=False), {UUID: 2}) == want
    assert pbs_jobs.gpu_indexes(pbs_jobs.NativeJob(JOB, [1], set(), ungpued=True)) is None  # none given: unknown


def test_uuids_map_to_indexes_through_nvidia_smi(tmp_path):
    smi = fake_nvidia_smi(tmp_path, f"0, GPU-0c9b8a7d-6e5f-4a3b-2c1d-0e9f8a7b6c5d\n2, {UUID}\nnot a line\n")
    assert pbs_jobs.uuid_indexes(str(smi)) == {"GPU-0c9b8a7d-6e5f-4a3b-2c1d-0e9f8a7b6c5d": 0, UUID: 2}
    assert pbs_jobs.uuid_indexes(str(tmp_path / "missing")) == {}


def test_a_real_process_of_a_job_is_found_with_the_cpus_it_may_run_on(tmp_path):
    env = os.environ | {"PBS_JOBID": JOB, "CUDA_VISIBLE_DEVICES": "0"}
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], env=env,
                             preexec_fn=lambda: os.sched_setaffinity(0, {0}))  # fmt: skip
    try:
        jobs = wait_until(lambda: (found := pbs_jobs.discover()).get(JOB) and found, timeout=10)
        assert child.pid in jobs[JOB].pids
        assert pbs_jobs.gpu_indexes(jobs[JOB]) == [0]
        assert pbs_jobs.cpus_of(jobs[JOB]) == 1  # its cpuset, not the node's
        assert pbs_jobs.processes_cpu_seconds(jobs[JOB], Path("/proc")) is not None
    finally:
        child.kill()
        child.wait()


@pytest.fixture
def native(alice, submit, hosts):
    """A native PBS job running on gpu-7, whose sampler could not join it; the agents of `hosts` run on its nodes."""
    pbs = Fabric.objects.create(name="pbs", kind="pbs", gpus_milli=8000, cpus_milli=32000, memory_mib=64000,
                                settings={"agent_fabric": hosts["fabric"].name})  # fmt: skip
    w = submit(alice, name="native", gpus=2)
    Workload.objects.filter(pk=w.pk).update(fabric=pbs, state=State.RUNNING, external_id=JOB, host="gpu-7",
                                            script="#PBS -l select=1:ngpus=2\n./train")  # fmt: skip
    SamplerStart.objects.create(workload_id=w.pk, at="2026-11-30T10:00Z", reason="run Gridlane's agent on its nodes")
    return w


@pytest.fixture
def pbs_job(native, hosts):
    w = native
    client = bearer(hosts["token"])
    client.post("/api/v1/agent/register/", {"host": "gpu-7.cluster.example", "queues": ["gpu-a"]}, format="json")
    client.post("/api/v1/agent/register/", {"host": "gpu-8", "queues": ["gpu-a"]}, format="json")
    return client, w


def test_the_portal_keeps_an_agent_s_readings_as_the_native_job_s_on_its_host(pbs_job, django_assert_max_num_queries):
    client, w = pbs_job
    reading = {"at": "2026-11-30T10:05:00+00:00", "gpu_utilisation": 20.0, "cpu_utilisation": 50.0,
               "gpu_memory_mib": 4000}  # fmt: skip
    url = "/api/v1/agent/pbs-jobs/usage/"
    with django_assert_max_num_queries(8):
        answer = client.post(url, {"host": "gpu-7.cluster.example", "jobs": {JOB: [reading], "9.other": [reading]}},
                             format="json")  # fmt: skip
    assert answer.json() == {"recorded": 1, "unknown": ["9.other"]}
    kept = UsageSample.objects.get(workload=w)
    assert (kept.gpu_utilisation, kept.cpu_utilisation, kept.source) == (20.0, 50.0, "agent")
    assert SamplerStart.objects.filter(workload_id=w.pk, started=True, reason="").exists()
    # another node's agent does not speak for it
    assert client.post(url, {"host": "gpu-8", "jobs": {JOB: [reading]}}, format="json").json()["unknown"] == [JOB]
    refused = client.post(url, {"host": "gpu-8", "jobs": {JOB: [reading | {"power": 1}]}}, format="json")
    assert refused.status_code == 400, refused.json()
    assert list(refused.json()["errors"]) == [f"jobs.{JOB}.0.power"]  # the field named, nothing kept
    unknown = client.post(url, {"host": "gpu-8", "queue": "x"}, format="json")
    assert list(unknown.json()["errors"]) == ["queue"]
    assert UsageSample.objects.count() == 1


def test_only_the_agents_the_pbs_fabric_names_speak_for_its_jobs(pbs_job, hosts):
    client, w = pbs_job
    Fabric.objects.filter(kind="pbs").update(settings={"agent_fabric": "some-other-agents"})
    reading = {"at": "2026-11-30T10:05:00+00:00", "cpu_utilisation": 50.0}
    answer = client.post("/api/v1/agent/pbs-jobs/usage/", {"host": "gpu-7.cluster.example", "jobs": {JOB: [reading]}},
                         format="json")  # fmt: skip
    assert answer.json() == {"recorded": 0, "unknown": [JOB]}
    assert not UsageSample.objects.filter(workload=w).exists()


def test_a_running_agent_samples_a_native_job_on_its_node(native, start_agent, tmp_path):
    smi = fake_nvidia_smi(tmp_path, SMI)
    env = os.environ | {"PBS_JOBID": JOB, "CUDA_VISIBLE_DEVICES": "1,3"}
    job = subprocess.Popen([sys.executable, "-c", "import time\nwhile True: time.sleep(0.001)"], env=env)
    try:
        start_agent("gpu-7", "gpu-a", extra=("--pbs-jobs", "--nvidia-smi", str(smi)))
        kept = wait_until(lambda: UsageSample.objects.filter(workload=native, cpu_utilisation__isnull=False).first(),
                          timeout=60, every=0.2)  # fmt: skip
    finally:
        job.kill()
        job.wait()
    assert (kept.gpu_utilisation, kept.gpu_memory_mib, kept.source) == (20.0, 4000, "agent")  # its GPUs, 1 and 3
    assert (kept.node, kept.gpus_read, kept.gpus_idle) == ("gpu-7", 2, 2)  # each below 80 %: idle, GPU by GPU
    assert sorted(UsageGpuSample.objects.filter(workload=native, at=kept.at).values_list("gpu", "utilisation")) == [
        (1, 10.0), (3, 30.0)]  # fmt: skip
    assert 0 <= kept.cpu_utilisation <= 100
    assert SamplerStart.objects.get(workload_id=native.pk).started


class EarlierPortal:
    """What a portal of the previous version answers: `gpus` is a field it does not know (its 400 names it)."""

    def __init__(self) -> None:
        self.kept: list[dict] = []

    def post(self, path, body):
        for job_id, readings in body["jobs"].items():
            if any("gpus" in r for r in readings):
                raise ApiError(400, f"jobs.{job_id}.0.gpus: Unknown field.")
        self.kept.append(body)


def test_an_earlier_portal_gets_the_averages_it_knows_from_then_on():
    portal = EarlierPortal()
    post = pbs_jobs.Poster(portal.post, "gpu-7")
    reading = {"at": "2026-11-30T10:05:00+00:00", "gpu_utilisation": 20.0, "cpu_utilisation": None,
               "gpu_memory_mib": 4000, "gpus": [{"index": 1, "utilisation": 10, "memory_mib": 1000}]}  # fmt: skip
    post({JOB: reading})
    post({JOB: reading})
    averaged = {k: v for k, v in reading.items() if k != "gpus"}
    assert portal.kept == [{"host": "gpu-7", "jobs": {JOB: [averaged]}}] * 2  # the first sample too, sent again
    assert not post.per_gpu


def test_another_refusal_is_no_reason_to_drop_the_gpus():
    def refuses(path, body):
        raise ApiError(400, f"jobs.{JOB}.0.gpus: GPU 0: utilisation, 0 to 100, or null where it reads none.")

    post = pbs_jobs.Poster(refuses, "gpu-7")
    with pytest.raises(ApiError):
        post({JOB: {"gpus": [{"index": 0, "utilisation": 500}]}})
    assert post.per_gpu
