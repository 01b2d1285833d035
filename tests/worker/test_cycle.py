"""The worker end to end on the local fabric: real processes, real cycles, no mocks."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest
from django.conf import settings as django_settings

from fabrics.local.fabric import LocalFabric
from portal.queues.models import Fabric
from portal.worker import tasks
from portal.worker.dispatch import job_spec
from portal.worker.lock import cycle_lock
from portal.workloads import services
from portal.workloads.models import Workload
from portal.workloads.states import State
from scheduler import reasons
from tests.conftest import wait_until

pytestmark = pytest.mark.usefixtures("local_jobs")  # tests/conftest.py


def run_until(workload: Workload, *states: State, timeout: float = 20) -> Workload:
    def reached():
        tasks.cycle()
        workload.refresh_from_db()
        return workload.state in states

    wait_until(reached, timeout=timeout, every=0.1)
    return workload


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    status = Path(f"/proc/{pid}/status")
    return not (status.exists() and "\nState:\tZ" in status.read_text())


def test_a_submitted_job_runs_to_success_with_its_output_captured(alice, submit):
    workload = submit(alice, command='echo "hello from $GRIDLANE_WORKLOAD_ID"; echo oops >&2')
    run_until(workload, State.SUCCEEDED)
    assert workload.exit_code == 0
    assert f"hello from {workload.pk}" in workload.log_tail
    assert "oops" in workload.log_tail
    assert workload.fabric.name == "local"
    assert workload.external_id == str(workload.pk)
    assert workload.rendered.startswith("#!/bin/bash")
    steps = list(workload.events.values_list("to_state", flat=True))
    assert steps == ["pending", "admitted", "dispatching", "running", "succeeded"]
    assert workload.submitted_at <= workload.admitted_at <= workload.started_at <= workload.finished_at


def test_a_failing_command_fails_with_its_exit_code(alice, submit):
    workload = submit(alice, command="exit 3")
    run_until(workload, State.FAILED)
    assert workload.exit_code == 3


def test_cancel_kills_the_whole_process_group(alice, submit, tmp_path):
    pids = tmp_path / "pids"
    workload = submit(alice, command=f"sleep 300 & echo $! > {pids}; sleep 300")
    run_until(workload, State.RUNNING)
    background = int(wait_until(lambda: pids.exists() and pids.read_text().strip()))
    assert pid_alive(background)

    services.do_cancel(alice, workload)
    run_until(workload, State.CANCELLED)

    wait_until(lambda: not pid_alive(background), timeout=60)
    assert [e.to_state for e in workload.events.all()][-2:] == ["cancelling", "cancelled"]


def test_the_runtime_limit_stops_the_job_and_it_ends_expired(alice, submit):
    workload = submit(alice, command="sleep 300")
    Workload.objects.filter(pk=workload.pk).update(runtime_limit_s=1)  # the API's floor is a minute
    workload.refresh_from_db()
    run_until(workload, State.EXPIRED)
    assert "runtime limit" in workload.events.last().reason


def test_a_worker_that_died_after_submitting_reconciles_instead_of_running_twice(alice, submit, tmp_path):
    runs = tmp_path / "runs"
    workload = submit(alice, command=f"echo ran >> {runs}")
    # A worker admits it, records its intent, submits to the fabric... and dies before saving the job id.
    with cycle_lock():
        pass
    from portal.worker import apply, snapshot
    from scheduler import decide

    snap, pending = snapshot.build(workload.submitted_at)
    apply.apply(decide(snap), pending)
    workload.refresh_from_db()
    services.transition(workload, State.DISPATCHING, reason="dispatching to local")
    fabric = LocalFabric(Fabric.objects.get(name="local").to_config())
    fabric.submit(job_spec(Workload.objects.select_related("owner", "group", "queue", "target").get()))
    assert Workload.objects.get().external_id == ""

    # The restarted worker finds the job by its tag and follows it.
    run_until(workload, State.SUCCEEDED)
    assert workload.external_id == str(workload.pk)
    assert runs.read_text() == "ran\n"


def test_work_over_the_team_limit_waits_with_the_numbers(alice, submit):
    jobs = [submit(alice, name=f"j{i}", command="sleep 300", gpus=2) for i in range(4)]  # vision's limit: 6 GPUs
    tasks.cycle()
    states = [Workload.objects.get(pk=j.pk).state for j in jobs]
    assert states.count(State.PENDING) == 1
    waiting = Workload.objects.get(state=State.PENDING)
    assert waiting.pending_reason_code == reasons.GROUP_AT_LIMIT
    assert "6 GPUs of its limit of 6" in waiting.pending_reason


def test_one_admission_at_a_time(alice, submit):
    """Another worker process (here a thread with its own database connection) holds the lock: an admission
    waits for it, and gives up only when it is held throughout the wait."""
    import threading

    from django.db import connection

    submit(alice)
    taken, release = threading.Event(), threading.Event()
    outcome = {}

    def other_worker():
        try:
            with cycle_lock() as held:
                outcome["held"] = held
                taken.set()
                release.wait(10)
        finally:
            connection.close()

    thread = threading.Thread(target=other_worker)
    thread.start()
    try:
        assert taken.wait(10)
        assert outcome["held"]
        assert tasks.admit(wait_s=0.2) == {"skipped": True}
        threading.Timer(0.2, release.set).start()
        assert tasks.admit(wait_s=10)["admitted"] == 1  # it waited for the other to let go
    finally:
        release.set()
        thread.join()


def test_a_dispatch_asked_for_while_another_runs_is_run_by_that_one(transactional_db, alice, submit):
    """The process dispatching goes round once more for whoever asked meanwhile, so no admission is left
    undispatched until the next tick."""
    import threading

    from django.db import connection

    from portal.worker import dispatch, stats

    first = submit(alice, name="first", command="sleep 30")
    tasks.admit()
    second = submit(alice, name="second", command="sleep 30")
    inside, go_on = threading.Event(), threading.Event()
    real = dispatch.dispatch_all
    rounds = []

    def slow_dispatch_all():
        done = real()
        rounds.append(done)
        if len(rounds) == 1:
            inside.set()
            go_on.wait(10)
        return done

    outcome = {}

    def other_worker():
        try:
            outcome["dispatched"] = tasks.dispatch()
        finally:
            connection.close()

    dispatch.dispatch_all = slow_dispatch_all
    try:
        thread = threading.Thread(target=other_worker)
        thread.start()
        assert inside.wait(10)
        tasks.admit()  # the second is admitted after the first dispatch read what to do
        assert tasks.dispatch() == 0  # the lock is held: it asks instead of waiting
        go_on.set()
        thread.join(30)
    finally:
        dispatch.dispatch_all = real
    assert rounds == [1, 1]
    assert outcome["dispatched"] == 2
    assert not stats.take_request("dispatch_requested")
    assert {Workload.objects.get(pk=w.pk).external_id for w in (first, second)} == {str(first.pk), str(second.pk)}


def test_a_job_the_fabric_lost_fails_with_a_reason(alice, submit):
    import shutil

    workload = submit(alice, command="sleep 300")
    run_until(workload, State.RUNNING)
    jobdir = Path(django_settings.GRIDLANE_LOCAL_FABRIC_ROOT) / "local" / str(workload.pk)
    os.killpg(int((jobdir / "child.pid").read_text()), signal.SIGKILL)
    wait_until(lambda: (jobdir / "result.json").exists(), timeout=60)
    shutil.rmtree(jobdir)
    run_until(workload, State.FAILED)
    assert "lost the job" in workload.events.last().reason


def test_a_job_cancelled_on_the_fabric_itself_ends_cancelled(alice, submit):
    workload = submit(alice, command="sleep 300")
    run_until(workload, State.RUNNING)
    LocalFabric(Fabric.objects.get(name="local").to_config()).cancel(workload.external_id)
    run_until(workload, State.CANCELLED)
    assert "outside Gridlane" in workload.events.last().reason


def test_cancelling_before_dispatch_finishes_leaves_nothing_running(alice, submit, tmp_path):
    runs = tmp_path / "runs"
    workload = submit(alice, command=f"echo ran >> {runs}")
    from portal.worker import apply, snapshot
    from scheduler import decide

    snap, pending = snapshot.build(workload.submitted_at)
    apply.apply(decide(snap), pending)
    workload.refresh_from_db()
    services.transition(workload, State.DISPATCHING, reason="dispatching")  # intent recorded, then a crash
    services.do_cancel(alice, Workload.objects.get())
    run_until(workload, State.CANCELLED)
    assert not runs.exists()
