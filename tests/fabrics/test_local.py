"""The local fabric against real processes, each test in its own root directory."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

import pytest

from fabrics.base import (
    CANNOT_EXTEND,
    FabricConfig,
    FabricError,
    JobSpec,
    JobState,
    JobStatus,
    Resources,
    TemplateError,
    can_extend,
    extend,
)
from fabrics.local.fabric import SUPERVISOR_LOST, LocalFabric, spawn_supervisor
from fabrics.local.supervisor import GRACE_ENV, group_alive
from fabrics.registry import fabric_class

T = TypeVar("T")
DEADLINE_S = 60.0


def wait_for(check: Callable[[], T | None], what: str, timeout: float = DEADLINE_S) -> T:
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.02)


@pytest.fixture
def fabric(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> LocalFabric:
    monkeypatch.setenv(GRACE_ENV, "0.3")  # the supervisors inherit it through submit
    config = FabricConfig("here", "local", Resources(1000, 8000, 16384), {"root": str(tmp_path / "jobs")})
    return LocalFabric(config)


def job(command: str, **overrides: Any) -> JobSpec:
    fields: dict[str, Any] = {
        "workload_id": uuid.uuid4(),
        "name": "probe",
        "kind": "batch",
        "owner": "ada",
        "group": "ml",
        "queue": "default",
        "command": command,
        "per_node": Resources(250, 2000, 1024),
        "runtime_limit_s": 60,
    }
    return JobSpec(**(fields | overrides))


def finished(fabric: LocalFabric, external_id: str) -> JobStatus:
    def status() -> JobStatus | None:
        current = fabric.poll([external_id])[external_id]
        return current if current.state.finished else None

    return wait_for(status, f"job {external_id} to finish")


def child_pgid(fabric: LocalFabric, external_id: str) -> int:
    path = fabric.root / external_id / "child.pid"
    return int(wait_for(lambda: path.read_text() if path.exists() else None, "the job to start"))


def test_an_echo_command_succeeds_and_tail_shows_its_stdout_and_stderr(fabric):
    external_id = fabric.submit(job("echo out; echo err >&2"))
    status = finished(fabric, external_id)
    assert status.state is JobState.SUCCEEDED
    assert status.exit_code == 0
    assert status.started_at is not None
    assert status.finished_at is not None
    assert status.started_at.tzinfo is not None
    assert status.finished_at >= status.started_at
    assert status.host
    assert fabric.tail(external_id) == "out\n--- stderr ---\nerr\n"


def test_tail_keeps_the_end_of_the_output_and_is_empty_without_output(fabric):
    quiet = fabric.submit(job("true"))
    loud = fabric.submit(job("seq 1 1000"))
    finished(fabric, quiet)
    finished(fabric, loud)
    assert fabric.tail(quiet) == ""
    assert fabric.tail(loud, max_bytes=8) == "998\n999\n1000\n"[-8:]


def test_a_command_exiting_3_fails_with_exit_code_3(fabric):
    status = finished(fabric, fabric.submit(job("exit 3")))
    assert status.state is JobState.FAILED
    assert status.exit_code == 3


def test_the_workload_id_and_the_jobs_env_are_in_the_jobs_environment(fabric):
    spec = job('echo "$GRIDLANE_WORKLOAD_ID $COLOUR"; pwd', env={"COLOUR": "blue"})
    external_id = fabric.submit(spec)
    finished(fabric, external_id)
    workdir = fabric.root / external_id / "work"
    assert fabric.tail(external_id) == f"{spec.workload_id} blue\n{workdir}\n"


def test_cancel_stops_every_process_of_the_job_and_records_cancelled(fabric):
    external_id = fabric.submit(job("sleep 300 & sleep 300; wait"))
    pgid = child_pgid(fabric, external_id)
    assert fabric.poll([external_id])[external_id].state is JobState.RUNNING
    fabric.cancel(external_id)
    status = finished(fabric, external_id)
    assert status.state is JobState.CANCELLED
    assert not group_alive(pgid)


def test_a_finished_job_leaves_no_background_process_behind(fabric):
    external_id = fabric.submit(job("sleep 300 & echo started"))
    pgid = child_pgid(fabric, external_id)
    status = finished(fabric, external_id)
    assert status.state is JobState.SUCCEEDED
    assert not group_alive(pgid)


def test_a_job_that_ignores_sigterm_is_killed_after_the_grace(fabric):
    external_id = fabric.submit(job("trap '' TERM; sleep 300 & sleep 300; wait"))
    pgid = child_pgid(fabric, external_id)
    fabric.cancel(external_id)
    assert finished(fabric, external_id).state is JobState.CANCELLED
    assert not group_alive(pgid)


def test_cancel_before_the_job_starts_means_it_never_runs(fabric, tmp_path):
    marker = tmp_path / "ran"
    jobdir = fabric.prepare(job(f"touch {marker}"))
    fabric.cancel(jobdir.name)
    assert fabric.poll([jobdir.name])[jobdir.name].state is JobState.CANCELLED
    spawn_supervisor(jobdir).wait()
    wait_for(lambda: (jobdir / "result.json").exists(), "the supervisor to record the result")
    assert finished(fabric, jobdir.name).state is JobState.CANCELLED
    assert not marker.exists()


def test_the_runtime_limit_ends_the_job_timed_out(fabric):
    external_id = fabric.submit(job("sleep 300", runtime_limit_s=1))
    pgid = child_pgid(fabric, external_id)
    status = finished(fabric, external_id)
    assert status.state is JobState.TIMED_OUT
    assert status.exit_code == 128 + signal.SIGTERM
    assert not group_alive(pgid)


def test_an_extended_deadline_keeps_a_job_alive_past_its_limit_until_the_new_end(fabric):
    external_id = fabric.submit(job("sleep 300", runtime_limit_s=2))
    pgid = child_pgid(fabric, external_id)
    started = time.monotonic()
    fabric.extend(external_id, datetime.now(UTC) + timedelta(seconds=5))
    time.sleep(max(0.0, started + 3 - time.monotonic()))  # past the 2 s it was started with
    assert fabric.poll([external_id])[external_id].state is JobState.RUNNING
    assert group_alive(pgid)
    status = finished(fabric, external_id)
    assert status.state is JobState.TIMED_OUT
    assert time.monotonic() - started >= 4  # it outlived its first limit (a slow machine only adds)
    limit = re.fullmatch(r"stopped at the (\d+) s limit", status.reason)
    assert limit is not None
    assert int(limit[1]) in (5, 6)  # counted from the job's start, a moment before extend was called


def test_extend_refuses_what_is_not_running_and_a_fabric_without_extend_says_so(fabric):
    with pytest.raises(FabricError, match="not running"):
        fabric.extend(str(uuid.uuid4()), datetime.now(UTC))
    external_id = fabric.submit(job("true"))
    finished(fabric, external_id)
    with pytest.raises(FabricError, match="already ended"):
        fabric.extend(external_id, datetime.now(UTC) + timedelta(hours=1))
    assert can_extend(fabric)

    class Plain:
        pass

    with pytest.raises(FabricError, match=CANNOT_EXTEND) as refused:
        extend(Plain(), "x", datetime.now(UTC))  # type: ignore[arg-type]
    assert not refused.value.retryable


def test_submitting_twice_and_racing_two_supervisors_runs_the_command_once(fabric, tmp_path):
    counter = tmp_path / "counter"
    spec = job(f"echo ran >> {counter}")
    jobdir = fabric.prepare(spec)
    racers = [spawn_supervisor(jobdir), spawn_supervisor(jobdir)]
    assert fabric.submit(spec) == str(spec.workload_id)
    assert fabric.submit(spec) == str(spec.workload_id)
    for racer in racers:
        racer.wait()
    assert finished(fabric, str(spec.workload_id)).state is JobState.SUCCEEDED
    assert counter.read_text() == "ran\n"


def test_find_returns_none_before_submit_and_the_id_after(fabric):
    spec = job("true")
    assert fabric.find(spec.workload_id) is None
    external_id = fabric.submit(spec)
    assert fabric.find(spec.workload_id) == external_id == str(spec.workload_id)


@pytest.mark.parametrize(
    "name",
    ["x'; touch PWNED #", "$(touch PWNED)", "`touch PWNED`", "x\ntouch PWNED", "x\\'\ntouch PWNED\n#"],
)
def test_a_hostile_name_stays_data_and_the_command_reaches_bash_verbatim(fabric, tmp_path, name):
    command = """printf '%s|' "a  b" 'c"d' $((6*7)); echo"""
    external_id = fabric.submit(job(command, name=name))
    assert finished(fabric, external_id).state is JobState.SUCCEEDED
    assert fabric.tail(external_id) == 'a  b|c"d|42|\n'
    assert list(tmp_path.rglob("PWNED")) == []


def test_render_writes_the_default_script(fabric):
    spec = job("python train.py --lr 0.1", workload_id=uuid.UUID(int=1), name="it's mine")
    assert fabric.render(spec) == (
        "#!/bin/bash\n"
        "# Gridlane local job\n"
        ": workload 00000000-0000-0000-0000-000000000001 name 'it'\"'\"'s mine'\n"
        "exec /bin/bash -c 'python train.py --lr 0.1'\n"
    )


def test_render_fills_a_queue_targets_template_with_quoted_values(fabric):
    template = "#!/bin/bash\nrun --gpus=$gpus --cpus=${cpus} --mem=$memory_mib --as $owner -- $command\n"
    spec = job("echo hi there", template=template, per_node=Resources(250, 2000, 1024))
    expected = "#!/bin/bash\nrun --gpus=0.25 --cpus=2 --mem=1024 --as ada -- 'echo hi there'\n"
    assert fabric.render(spec) == expected


@pytest.mark.parametrize(
    "template",
    [
        "echo $nosuchname\n",
        "echo $ 5\n",
        "# job $name\n",
        'echo "running $name"\n',
        "echo 'running $name'\n",
        "echo \\$name\n",
        "cat <<EOF\n$name\nEOF\n",
    ],
)
def test_check_template_rejects_unknown_malformed_and_unsafe_placeholders(template):
    with pytest.raises(TemplateError):
        LocalFabric.check_template(template)


@pytest.mark.parametrize(
    "template",
    [
        "",
        "#!/bin/bash\n# cost $$5, see $${x}\nsrun --job-name=$name bash -c $command\n",
        'echo "$${HOME}" # a $$ comment\nexec bash -c $command\n',
        "cat <<'EOF'\n$name\nEOF\necho $name\n",
    ],
)
def test_check_template_accepts_safe_templates(template):
    LocalFabric.check_template(template)


def test_check_settings_needs_a_root():
    with pytest.raises(ValueError, match="root"):
        LocalFabric.check_settings({})
    with pytest.raises(ValueError, match="root"):
        LocalFabric.check_settings({"root": 7})
    LocalFabric.check_settings({"root": "jobs"})


def test_the_registry_names_the_local_fabric():
    assert fabric_class("local") is LocalFabric


def test_poll_of_unknown_or_malformed_ids_is_missing(fabric):
    ids = [str(uuid.uuid4()), "../../etc", "not-a-uuid"]
    assert {i: s.state for i, s in fabric.poll(ids).items()} == dict.fromkeys(ids, JobState.MISSING)


def test_a_corrupt_record_is_undetermined_without_hiding_other_jobs(fabric):
    good = fabric.submit(job("true"))
    bad = fabric.prepare(job("true"))
    (bad / "result.json").write_text("{not json")
    finished(fabric, good)
    statuses = fabric.poll([good, bad.name])
    assert statuses[good].state is JobState.SUCCEEDED
    assert statuses[bad.name].state is JobState.UNDETERMINED


def test_a_prepared_job_without_a_supervisor_is_queued(fabric):
    jobdir = fabric.prepare(job("true"))
    assert fabric.poll([jobdir.name])[jobdir.name].state is JobState.QUEUED


def test_a_killed_supervisor_leaves_running_then_failed(fabric):
    external_id = fabric.submit(job("while [ ! -e go ]; do sleep 0.02; done"))
    jobdir = fabric.root / external_id
    child_pgid(fabric, external_id)
    supervisor = json.loads((jobdir / "started").read_text())["pid"]
    os.kill(supervisor, signal.SIGKILL)
    status = wait_for(
        lambda: (s := fabric.poll([external_id])[external_id]).reason and s,
        "poll to notice the supervisor is gone",
    )
    assert status.state is JobState.RUNNING
    (jobdir / "work" / "go").touch()
    status = finished(fabric, external_id)
    assert status.state is JobState.FAILED
    assert status.reason == SUPERVISOR_LOST
    assert status.exit_code is None


def test_capacity_is_healthy_for_a_writable_root_and_not_for_a_file(fabric, tmp_path):
    capacity = fabric.capacity()
    assert capacity.healthy
    assert capacity.total == Resources(1000, 8000, 16384)
    assert fabric.root.is_dir()
    (tmp_path / "file").write_text("")
    blocked = LocalFabric(FabricConfig("x", "local", Resources(), {"root": str(tmp_path / "file" / "jobs")}))
    assert not blocked.capacity().healthy


@pytest.fixture
def launches(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many jobs each launcher the fabric spawns is given, in order."""
    from fabrics.local import fabric as local

    counts: list[int] = []
    real = local.spawn_supervisors

    def counted(jobdirs):
        counts.append(len(jobdirs))
        return real(jobdirs)

    monkeypatch.setattr(local, "spawn_supervisors", counted)
    return counts


def test_a_batch_starts_every_supervisor_from_one_launcher_and_each_job_runs_once(fabric, tmp_path, launches):
    specs = [job(f"echo {i} >> {tmp_path}/ran-{i}") for i in range(8)]
    placed = fabric.submit_many(specs)
    assert placed == {s.workload_id: str(s.workload_id) for s in specs}
    assert launches == [8]
    for i, spec in enumerate(specs):
        assert finished(fabric, str(spec.workload_id)).state is JobState.SUCCEEDED
        assert (tmp_path / f"ran-{i}").read_text() == f"{i}\n"
    assert fabric.submit_many(specs) == placed  # all claimed already: nothing is started again
    assert launches == [8]


def test_one_bad_template_in_a_batch_fails_that_job_alone(fabric):
    good, bad = job("true"), job("true", template="#!/bin/bash\necho $nosuchname\n")
    placed = fabric.submit_many([good, bad])
    assert placed[good.workload_id] == str(good.workload_id)
    refused = placed[bad.workload_id]
    assert isinstance(refused, FabricError)
    assert not refused.retryable


def test_a_batch_whose_supervisors_never_claim_is_retryable_and_the_retry_runs_each_once(fabric, tmp_path, monkeypatch):
    from fabrics.local import fabric as local

    monkeypatch.setattr(local, "CLAIM_TIMEOUT_S", 0.0)
    monkeypatch.setattr(local, "CLAIM_PER_JOB_S", 0.0)
    monkeypatch.setattr(local, "spawn_supervisors", lambda jobdirs: subprocess.Popen(["true"]))  # a launcher lost
    specs = [job(f"echo ran >> {tmp_path}/ran-{i}") for i in range(3)]
    assert all(isinstance(o, FabricError) and o.retryable for o in fabric.submit_many(specs).values())
    monkeypatch.undo()
    assert all(fabric.find(s.workload_id) is None for s in specs)  # nothing ran: the next dispatch submits again
    fabric.submit_many(specs)
    for i, spec in enumerate(specs):
        assert finished(fabric, str(spec.workload_id)).state is JobState.SUCCEEDED
        assert (tmp_path / f"ran-{i}").read_text() == "ran\n"


def supervisor_of(fabric: LocalFabric, external_id: str) -> int:
    return int(json.loads((fabric.root / external_id / "started").read_text())["pid"])


def test_one_supervisor_runs_a_batch_and_each_job_ends_on_its_own(fabric, tmp_path):
    """A batch shares one supervisor process, but a job's cancel, limit and end are its own alone."""
    quick, failing = job(f"echo quick > {tmp_path}/quick"), job("exit 7")
    cancelled, limited = job("sleep 300 & sleep 300; wait"), job("sleep 300", runtime_limit_s=1)
    lasting = job("while [ ! -e go ]; do sleep 0.02; done")
    specs = [quick, failing, cancelled, limited, lasting]
    placed = fabric.submit_many(specs)
    ids = {s.workload_id: str(s.workload_id) for s in specs}
    assert placed == ids
    assert len({supervisor_of(fabric, i) for i in ids.values()}) == 1
    assert finished(fabric, ids[quick.workload_id]).state is JobState.SUCCEEDED
    assert (tmp_path / "quick").read_text() == "quick\n"
    assert finished(fabric, ids[failing.workload_id]).exit_code == 7
    pgid = child_pgid(fabric, ids[cancelled.workload_id])
    fabric.cancel(ids[cancelled.workload_id])
    assert finished(fabric, ids[cancelled.workload_id]).state is JobState.CANCELLED
    assert not group_alive(pgid)
    assert finished(fabric, ids[limited.workload_id]).state is JobState.TIMED_OUT
    assert fabric.poll([ids[lasting.workload_id]])[ids[lasting.workload_id]].state is JobState.RUNNING  # untouched
    (fabric.root / ids[lasting.workload_id] / "work" / "go").touch()
    assert finished(fabric, ids[lasting.workload_id]).state is JobState.SUCCEEDED


def test_a_job_whose_records_do_not_load_fails_alone_in_its_batch(fabric):
    good, broken = job("true"), job("true")
    jobdirs = [fabric.prepare(good), fabric.prepare(broken)]
    (jobdirs[1] / "job.json").write_text("{not json")
    from fabrics.local.fabric import spawn_supervisors

    spawn_supervisors(jobdirs).wait()
    assert finished(fabric, jobdirs[0].name).state is JobState.SUCCEEDED
    status = finished(fabric, jobdirs[1].name)
    assert status.state is JobState.FAILED
    assert "the supervisor failed" in status.reason


def test_sigterm_to_a_batchs_supervisor_stops_each_of_its_jobs_as_cancelled(fabric):
    specs = [job("sleep 300 & sleep 300; wait") for _ in range(3)]
    fabric.submit_many(specs)
    ids = [str(s.workload_id) for s in specs]
    groups = [child_pgid(fabric, i) for i in ids]
    os.kill(supervisor_of(fabric, ids[0]), signal.SIGTERM)
    assert all(finished(fabric, i).state is JobState.CANCELLED for i in ids)
    assert not any(group_alive(g) for g in groups)


def test_a_batch_larger_than_a_chunk_of_claims_runs_each_job_once(fabric, tmp_path):
    from fabrics.local.supervisor import CLAIM_CHUNK

    specs = [job(f"echo ran >> {tmp_path}/ran-{i}") for i in range(CLAIM_CHUNK + 3)]
    assert all(isinstance(o, str) for o in fabric.submit_many(specs).values())
    for i, spec in enumerate(specs):
        assert finished(fabric, str(spec.workload_id)).state is JobState.SUCCEEDED
        assert (tmp_path / f"ran-{i}").read_text() == "ran\n"


def test_a_burst_is_started_a_slice_at_a_time_each_slice_by_one_supervisor(fabric, tmp_path, launches, monkeypatch):
    from fabrics.local import fabric as local

    monkeypatch.setattr(local, "LAUNCH_SLICE", 3)
    specs = [job(f"echo {i} >> {tmp_path}/ran-{i}") for i in range(8)]
    assert fabric.submit_many(specs) == {s.workload_id: str(s.workload_id) for s in specs}
    assert launches == [3, 3, 2]
    slices = [{supervisor_of(fabric, str(s.workload_id)) for s in specs[at : at + 3]} for at in (0, 3, 6)]
    assert all(len(pids) == 1 for pids in slices)
    assert len(set.union(*slices)) == 3
    for i, spec in enumerate(specs):
        assert finished(fabric, str(spec.workload_id)).state is JobState.SUCCEEDED
        assert (tmp_path / f"ran-{i}").read_text() == f"{i}\n"


def test_a_result_that_cannot_be_written_leaves_the_batchs_other_jobs_supervised(fabric):
    unwritable, lasting = job("true"), job("while [ ! -e go ]; do sleep 0.02; done")
    jobdirs = [fabric.prepare(unwritable), fabric.prepare(lasting)]
    (jobdirs[0] / "result.json").mkdir()  # a directory where the result goes: its write fails
    (jobdirs[0] / "result.json" / "keep").touch()
    from fabrics.local.fabric import spawn_supervisors

    spawn_supervisors(jobdirs).wait()
    log = jobdirs[0] / "supervisor.log"
    wait_for(lambda: log.exists() and "cannot record the result" in log.read_text(), "the failed write to be told")
    assert fabric.poll([jobdirs[1].name])[jobdirs[1].name].state is JobState.RUNNING
    (jobdirs[1] / "work" / "go").touch()
    assert finished(fabric, jobdirs[1].name).state is JobState.SUCCEEDED


def test_a_supervisor_that_fails_stops_its_jobs_rather_than_leave_them_unwatched(fabric):
    jobdir = fabric.prepare(job("sleep 300"))
    failing = (
        "import sys; from pathlib import Path; import fabrics.local.supervisor as s\n"
        "def boom(jobs, live): raise RuntimeError('boom')\n"
        "s._round = boom\n"
        "s.supervise([Path(sys.argv[1])])\n"
    )
    done = subprocess.run([sys.executable, "-c", failing, str(jobdir)], capture_output=True, timeout=DEADLINE_S)
    assert done.returncode != 0
    assert b"RuntimeError: boom" in done.stderr
    pgid = int((jobdir / "child.pid").read_text())
    wait_for(lambda: not group_alive(pgid), "the job to be stopped with its supervisor")
