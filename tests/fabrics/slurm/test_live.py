"""The Slurm fabric against the real test cluster, over the real key-only sshd, as the worker uses it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from typing import Any

import pytest

from fabrics.base import FabricConfig, FabricError, JobState, Resources
from fabrics.slurm import parse
from fabrics.slurm.fabric import SlurmFabric
from tests.fabrics.slurm.conftest import REPO, finished, job, jobs_named, wait_for

HOSTILE = 'it\'s $(touch ~/pwned-{tag}) `touch ~/pwned-{tag}` "; touch ~/pwned-{tag}; "\n#SBATCH --partition=nope'


def test_a_job_runs_to_success_with_its_output_and_errors_in_the_tail(slurm):
    external_id = slurm.submit(job('echo "hello from $GRIDLANE_WORKLOAD_ID on $(hostname)"; echo oops >&2'))
    status = finished(slurm, external_id)
    assert status.state is JobState.SUCCEEDED
    assert status.exit_code == 0
    assert status.host
    assert status.started_at is not None
    assert status.finished_at is not None
    tail = slurm.tail(external_id)
    assert tail.startswith("hello from ")
    assert tail.endswith("--- stderr ---\noops\n")


def test_a_failing_command_fails_with_its_exit_code(slurm):
    status = finished(slurm, slurm.submit(job("exit 3")))
    assert (status.state, status.exit_code) == (JobState.FAILED, 3)


def test_several_submissions_share_one_round_trip_and_find_many_finds_them(slurm, monkeypatch):
    calls = []
    run = slurm.ssh.run

    def counting(*args: Any, **kwargs: Any) -> Any:
        calls.append(args)
        return run(*args, **kwargs)

    monkeypatch.setattr(slurm.ssh, "run", counting)
    specs = [job(f"echo {i}") for i in range(6)]
    submitted = slurm.submit_many(specs)
    assert len(calls) == 1
    assert all(isinstance(v, str) for v in submitted.values())
    assert slurm.find_many([s.workload_id for s in specs]) == submitted
    assert slurm.find(uuid.uuid4()) is None
    statuses = slurm.poll(list(submitted.values()))  # one squeue for all of them
    assert len(calls) == 4
    assert all(s.state is not JobState.MISSING for s in statuses.values())


def test_place_many_finds_what_has_a_job_and_submits_the_rest_in_one_round_trip(slurm, monkeypatch):
    """The dispatcher's call: the look-up (squeue, records) and the sbatch calls are one SSH command."""
    earlier = [job(f"echo {i}") for i in range(3)]
    submitted = slurm.submit_many(earlier)
    # One of them only slurmctld knows (its record is lost), one only its record names (squeue forgot it).
    assert slurm.ssh.run(["rm", f".gridlane/ids/{earlier[0].workload_id}"]).ok
    lookups, forgotten = slurm._lookups, earlier[1].workload_id
    monkeypatch.setattr(slurm, "_lookups", lambda wids: lookups([w for w in wids if w != forgotten]))
    calls = []
    run = slurm.ssh.run

    def counting(*args: Any, **kwargs: Any) -> Any:
        calls.append(args)
        return run(*args, **kwargs)

    monkeypatch.setattr(slurm.ssh, "run", counting)
    fresh = [job(f"echo new {i}") for i in range(3)]
    placed = slurm.place_many([*earlier, *fresh])
    assert len(calls) == 1
    assert {wid: placed[wid] for wid in submitted} == submitted
    assert all(isinstance(placed[s.workload_id], str) for s in fresh)
    wids = [s.workload_id for s in [*earlier, *fresh]]
    assert jobs_named(slurm, *wids) == {wid: [placed[wid]] for wid in wids}


def test_cancel_stops_a_running_job(slurm):
    external_id = slurm.submit(job("sleep 300"))
    wait_for(lambda: slurm.poll([external_id])[external_id].state is JobState.RUNNING, "the job to start")
    slurm.cancel(external_id)
    assert finished(slurm, external_id).state is JobState.CANCELLED
    slurm.cancel(external_id)  # cancelling a finished job is fine
    slurm.cancel("not-a-job-id")


def test_a_gpu_request_is_honoured_with_cuda_visible_devices(slurm):
    spec = job('echo "gpus=$CUDA_VISIBLE_DEVICES"', per_node=Resources(2000, 1000, 256))
    external_id = slurm.submit(spec)
    assert finished(slurm, external_id).state is JobState.SUCCEEDED
    devices = slurm.tail(external_id).strip().removeprefix("gpus=").split(",")
    assert len(devices) == 2


def test_an_impossible_request_is_refused_with_a_readable_reason(slurm):
    with pytest.raises(FabricError) as refused:
        slurm.submit(job("true", per_node=Resources(9000, 1000, 256)))
    assert not refused.value.retryable
    assert "no node of the cluster can ever hold this request" in str(refused.value)


def test_a_held_job_shows_slurms_reason_in_words_and_runs_once_released(slurm):
    template = "#!/bin/bash\n#SBATCH --hold\nexec /bin/bash -c $command\n"
    external_id = slurm.submit(job("echo released", template=template))
    status = slurm.poll([external_id])[external_id]
    assert status.state is JobState.QUEUED
    assert status.reason == "Held on the cluster by its submitter; it starts once released. [Slurm: JobHeldUser]"
    assert slurm.ssh.run(["scontrol", "release", external_id]).ok
    assert finished(slurm, external_id).state is JobState.SUCCEEDED


def test_a_qos_gpu_limit_shows_as_the_reason_the_job_waits(slurm):
    template = "#!/bin/bash\n#SBATCH --qos=gl-gpu2\nexec /bin/bash -c $command\n"
    first = slurm.submit(job("sleep 300", template=template, per_node=Resources(2000, 1000, 256)))
    try:
        wait_for(lambda: slurm.poll([first])[first].state is JobState.RUNNING, "the first QOS job to start", 90)
        second = slurm.submit(job("true", template=template, per_node=Resources(1000, 1000, 256)))
        try:

            def waits_for_the_limit() -> str | None:
                status = slurm.poll([second])[second]
                return status.reason if "QOSMaxGRESPerUser" in status.reason else None

            reason = wait_for(waits_for_the_limit, "Slurm to give the QOS reason", 30)
            assert reason.startswith("Waiting: the cluster's QOS limit on GPUs per user")
        finally:
            slurm.cancel(second)
    finally:
        slurm.cancel(first)


def test_hostile_names_commands_and_environment_values_are_never_executed(slurm):
    tag = uuid.uuid4().hex[:8]
    hostile = HOSTILE.format(tag=tag)
    command = "printf '%s|' \"$NOTE\" 'a \"quoted\" word' `echo backticks`; echo"
    external_id = slurm.submit(job(command, name=hostile, env={"NOTE": hostile}))
    status = finished(slurm, external_id)
    assert status.state is JobState.SUCCEEDED
    assert slurm.tail(external_id) == f'{hostile}|a "quoted" word|backticks|\n'
    assert not slurm.ssh.run(["bash", "-c", f"ls ~/pwned-{tag}"]).ok


def test_capacity_comes_from_sinfo_per_partition_and_gpu_type(slurm):
    capacity = slurm.capacity()
    assert capacity.healthy
    assert capacity.total == Resources(10000, 48000, 96000)  # both nodes, each once
    assert "gpu: 1/1 nodes up, 32 CPUs, 62 GiB, GPUs: 4 a100, 4 h100" in capacity.detail
    assert "multi: 2/2 nodes up, 48 CPUs, 93 GiB, GPUs: 6 a100, 4 h100" in capacity.detail


def test_accounting_answers_for_a_job_slurmctld_has_forgotten(slurm, monkeypatch):
    external_id = slurm.submit(job("exit 4"))
    assert finished(slurm, external_id).exit_code == 4
    # As after MinJobAge: squeue no longer lists the job; sacct (slurmdbd) still knows how it ended.
    monkeypatch.setattr(parse, "squeue", lambda text: [])
    status = wait_for(lambda: (s := slurm.poll([external_id])[external_id]).state.finished and s, "sacct to know")
    assert (status.state, status.exit_code) == (JobState.FAILED, 4)
    assert slurm.poll(["99999999"])["99999999"].state is JobState.MISSING


def test_a_changed_host_key_is_refused_and_an_unknown_host_too(cluster_lock, slurm_settings, tmp_path):
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp_path / "k")], check=True)
    other = (tmp_path / "k.pub").read_text().split(" ")[1]
    host = slurm_settings["known_hosts"].split(" ")[0]
    cases = {
        "does not match": f"{host} ssh-ed25519 {other}",
        "has no key for this host": f"[other.example]:22 ssh-ed25519 {other}",
    }
    for complaint, known_hosts in cases.items():
        fabric = SlurmFabric(FabricConfig("evil", "slurm", Resources(), slurm_settings | {"known_hosts": known_hosts}))
        with pytest.raises(FabricError, match=complaint) as refused:
            fabric.poll(["1"])
        assert refused.value.retryable  # IT fixes the settings; the work waits meanwhile
        assert not fabric.capacity().healthy


def test_the_time_limit_ends_the_job_timed_out(cluster, slurm_settings):
    """Slurm looks at time limits every 30 s, so a one-minute limit ends the job after 60-90 s."""
    fabric = SlurmFabric(FabricConfig("hpc", "slurm", Resources(), slurm_settings))
    # No cluster lock: this test outlasts the controller-outage test and rides it out instead.
    external_id = retrying(lambda: fabric.submit(job("sleep 300", runtime_limit_s=60)))
    status = wait_for(
        lambda: (s := retrying(lambda: fabric.poll([external_id])[external_id])).state.finished and s,
        "the time limit",
        timeout=150,
        every=3,
    )
    assert status.state is JobState.TIMED_OUT
    fabric.close()


def retrying(call: Any, seconds: float = 60) -> Any:
    """call() again while it fails with a retryable FabricError (the controller may be away for a while)."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            return call()
        except FabricError as error:
            if not error.retryable or time.monotonic() > deadline:
                raise
            time.sleep(1)


@pytest.fixture
def gated_sbatch(slurm, cluster):
    """A bin_dir whose sbatch counts its calls and holds the third until the test opens the gate, so a batch
    is interrupted exactly halfway: two jobs submitted, the third under way, three not begun."""
    bin_dir = f"{cluster['home']}/gated-bin-{uuid.uuid4().hex[:8]}"
    wrapper = (
        f"#!/bin/bash\nn=$(( $(cat {bin_dir}/calls 2>/dev/null || echo 0) + 1 )); echo $n > {bin_dir}/calls\n"
        f'if [ "$n" -eq 3 ]; then while [ ! -e {bin_dir}/open ]; do sleep 0.05; done; fi\n'
        'exec /usr/bin/sbatch "$@"\n'
    )
    script = "\n".join([
        f"mkdir -p {bin_dir}",
        f"cat > {bin_dir}/sbatch <<'WRAPPER'",
        wrapper + "WRAPPER",
        f"chmod +x {bin_dir}/sbatch",
        f"for c in squeue sacct scancel sinfo; do ln -sf /usr/bin/$c {bin_dir}/$c; done",
    ])  # fmt: skip
    assert slurm.ssh.run_script(script).ok

    def halfway() -> None:
        """Wait until the third sbatch is held at the gate."""
        wait_for(lambda: slurm.ssh.run(["cat", f"{bin_dir}/calls"]).stdout.strip() == "3", "the third sbatch")

    def open_gate() -> None:
        assert slurm.ssh.run(["touch", f"{bin_dir}/open"]).ok

    yield {"bin_dir": bin_dir, "halfway": halfway, "open": open_gate}
    open_gate()
    slurm.ssh.run(["rm", "-rf", bin_dir])


def test_ssh_dropped_mid_batch_loses_no_job_and_runs_none_twice(slurm, slurm_settings, gated_sbatch):
    settings = slurm_settings | {"bin_dir": gated_sbatch["bin_dir"], "submit_parallelism": 1}
    fabric = SlurmFabric(FabricConfig("hpc", "slurm", Resources(), settings))
    specs = [job("true") for _ in range(6)]
    outcome: dict[uuid.UUID, Any] = {}
    thread = threading.Thread(target=lambda: outcome.update(fabric.submit_many(specs)))
    thread.start()
    gated_sbatch["halfway"]()  # two of six sbatch calls have run, the third is under way
    transport = fabric.ssh._client.get_transport() if fabric.ssh._client else None
    assert transport is not None
    transport.sock.close()  # the network goes away under the batch
    thread.join(30)
    gated_sbatch["open"]()  # the orphaned batch runs on to its end on the login node
    assert all(isinstance(v, FabricError) and v.retryable for v in outcome.values())

    # The next dispatch: its look-up waits for the orphaned batch, which ran on to its end, so it
    # finds every job and submits none.
    wids = [s.workload_id for s in specs]
    placed = slurm.place_many(specs)
    assert all(isinstance(v, str) for v in placed.values())
    assert slurm.find_many(wids) == placed
    assert jobs_named(slurm, *wids) == {wid: [placed[wid]] for wid in wids}
    fabric.close()


def test_a_worker_killed_mid_dispatch_leaves_one_job_per_workload(slurm, slurm_settings, gated_sbatch):
    settings = slurm_settings | {"bin_dir": gated_sbatch["bin_dir"], "submit_parallelism": 1}
    specs = [job("true") for _ in range(6)]
    program = textwrap.dedent(f"""\
        import uuid
        from fabrics.base import FabricConfig, JobSpec, Resources
        from fabrics.slurm.fabric import SlurmFabric
        fabric = SlurmFabric(FabricConfig("hpc", "slurm", Resources(), {settings!r}))
        ids = {[str(s.workload_id) for s in specs]!r}
        cpu = Resources(0, 1000, 256)
        jobs = [JobSpec(uuid.UUID(i), "probe", "batch", "ada", "ml", "hpc", "true", cpu) for i in ids]
        print("submitting", flush=True)
        fabric.place_many(jobs)
        print("submitted", flush=True)
    """)
    worker = subprocess.Popen(
        [sys.executable, "-c", program],
        cwd=REPO,
        stdout=subprocess.PIPE,
        text=True,
        env=os.environ | {"PYTHONPATH": str(REPO)},
    )
    assert worker.stdout is not None
    assert worker.stdout.readline().strip() == "submitting"
    gated_sbatch["halfway"]()  # mid-batch: two sbatch calls have run, the third is under way, three have not
    os.kill(worker.pid, signal.SIGKILL)
    worker.wait(10)
    assert worker.returncode == -signal.SIGKILL
    gated_sbatch["open"]()

    # The restarted worker dispatches the same workloads: it waits for the orphaned batch, finds its jobs.
    wids = [s.workload_id for s in specs]
    placed = slurm.place_many(specs)
    assert all(isinstance(v, str) for v in placed.values())
    assert slurm.find_many(wids) == placed
    assert jobs_named(slurm, *wids) == {wid: [placed[wid]] for wid in wids}
