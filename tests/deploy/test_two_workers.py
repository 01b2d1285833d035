"""Two workers against one PostgreSQL, one or the other SIGKILLed again and again (and started again, as
systemd's Restart=always does) while 300 workloads are submitted through the API: none is lost, none runs twice,
and the survivor carries on alone while the other is down."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from statistics import median

import pytest

from tests.deploy.helpers import ROOT, free_port, gunicorn, manage, production_env, wait_for
from tests.deploy.load import Load
from tests.deploy.postgres import psql

pytestmark = pytest.mark.slow

SUBMISSIONS = 300
CYCLE_S = 2.0


def start_worker(env, log):
    with log.open("ab") as out:
        return subprocess.Popen([sys.executable, str(ROOT / "manage.py"), "gridlane_worker"], env=env, cwd=ROOT,
                                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)  # fmt: skip


def admitted_since(database, moment: float) -> bool:
    rows = psql(database, "SELECT count(*) FROM workloads_workload WHERE admitted_at > to_timestamp(%s)", (moment,))
    return bool(rows[0][0])


def pending(database) -> bool:
    return bool(psql(database, "SELECT count(*) FROM workloads_workload WHERE state = 'pending'")[0][0])


def test_two_workers_one_killed_again_and_again_lose_nothing_and_run_nothing_twice(scratch_database, tmp_path):
    env = production_env(
        scratch_database, tmp_path / "var", GRIDLANE_SUBMIT_RATE_LIMIT="100000",
        GRIDLANE_LOCAL_FABRIC_ROOT=str(tmp_path / "jobs"), GRIDLANE_CYCLE_SECONDS=str(CYCLE_S),
    )  # fmt: skip
    for argv in (["migrate", "--no-input"], ["seed_demo"]):
        result = manage(env, *argv)
        assert result.returncode == 0, result.stderr
    token = manage(env, "issue_token", "alice").stdout.strip().splitlines()[-1]
    marker = tmp_path / "ran"
    logs = [tmp_path / "worker-a.log", tmp_path / "worker-b.log"]
    workers = [start_worker(env, log) for log in logs]
    kills, alone = 0, []  # alone: (from, to) spans in which one worker ran by itself
    try:
        port = free_port()
        with gunicorn(env, port, tmp_path / "web.log"):
            load = Load([port], token, marker, limit=SUBMISSIONS, pause_s=0.02)
            for thread in load.threads:
                thread.start()
            victim = 0
            while any(t.is_alive() for t in load.threads) or kills < 4:
                # Kill once the load has moved on since the last kill (paced by progress, not by the clock).
                progress = load.taken_count()
                wait_for(
                    lambda progress=progress: (
                        load.taken_count() >= progress + 10 or not any(t.is_alive() for t in load.threads)
                    ),
                    "submissions between kills",
                    timeout=300,
                )
                workers[victim].send_signal(signal.SIGKILL)  # the main process, as the OOM killer would
                workers[victim].wait()
                kills += 1
                down = time.time()
                # The other one alone until it has admitted something by itself (or nothing is left to admit).
                wait_for(lambda down=down: admitted_since(scratch_database, down) or not (
                    any(t.is_alive() for t in load.threads) or pending(scratch_database)
                ), "the survivor to admit alone", timeout=600)  # fmt: skip
                workers[victim] = start_worker(env, logs[victim])
                alone.append((down, time.time()))
                victim = 1 - victim
            for thread in load.threads:
                thread.join(timeout=60)
            assert len(load.taken) == SUBMISSIONS

            def all_done() -> bool:
                done = psql(scratch_database, "SELECT count(*) FROM workloads_workload WHERE state = 'succeeded'")
                return bool(done[0][0] == SUBMISSIONS)

            wait_for(all_done, "all 300 to succeed", timeout=900)
        ids = set(load.taken.values())
        rows = psql(scratch_database, "SELECT id::text, state FROM workloads_workload")
        assert {r[0] for r in rows} == ids  # none lost, none made twice
        ran = marker.read_text().split()
        assert len(ran) == SUBMISSIONS  # none ran twice
        assert set(ran) == ids
        # The survivor took over: while the other was down, it admitted what was waiting. Figures, side by side:
        # how long after a kill the next admission came, and the waits of what was submitted meanwhile and
        # while both ran (a busy machine makes cycles slow for both alike).
        admitted = sorted(float(r[0]) for r in psql(
            scratch_database, "SELECT extract(epoch FROM admitted_at) FROM workloads_workload"))  # fmt: skip
        taken_over = [t for t in (next((t - down for t in admitted if t > down), None) for down, _ in alone) if t]
        admitted_alone = [t for t in admitted if any(a < t < b for a, b in alone)]
        assert admitted_alone, "nothing was admitted while one worker was down"
        waits = psql(
            scratch_database,
            "SELECT extract(epoch FROM submitted_at), extract(epoch FROM admitted_at - submitted_at) "
            "FROM workloads_workload",
        )
        one = [float(w) for at, w in waits if any(a <= float(at) <= b for a, b in alone)]
        both = [float(w) for at, w in waits if not any(a <= float(at) <= b for a, b in alone)]
        print(
            f"\ntwo workers: {SUBMISSIONS} submitted, {kills} SIGKILLs, lost 0, run twice 0; "
            f"{len(admitted_alone)} admitted while one was down; the next admission came "
            f"{median(taken_over):.2f} s after a kill (median; a cycle is {CYCLE_S:g} s); "
            f"submit to admission, median/max: one worker {median(one):.2f}/{max(one):.2f} s, "
            f"both {median(both):.2f}/{max(both):.2f} s"
        )
    finally:
        for worker in workers:
            if worker.poll() is None:
                os.killpg(worker.pid, signal.SIGTERM)
                worker.wait(timeout=60)
