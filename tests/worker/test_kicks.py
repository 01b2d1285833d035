"""A submit wakes the worker: a NOTIFY sent inside the submitting transaction, heard by the worker's
listener, which admits at once instead of at the next tick. PostgreSQL only, like the listener itself."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from django.db import connection, transaction
from django_q.models import Task

from portal.worker import tasks, wake
from portal.worker.models import WorkerStats
from portal.workloads.models import Workload
from portal.workloads.states import State
from tests.conftest import wait_until

ROOT = Path(__file__).resolve().parents[2]


def kicks_heard(listener: psycopg.Connection[Any], wait_s: float) -> int:
    return sum(1 for _ in listener.notifies(timeout=wait_s))


def test_a_kick_is_heard_when_its_transaction_commits_and_never_when_it_rolls_back(transactional_db):
    with psycopg.connect(**connection.get_connection_params(), autocommit=True) as listener:
        listener.execute(f"LISTEN {wake.CHANNEL}")

        with transaction.atomic():
            wake.kick()
            assert kicks_heard(listener, 0.2) == 0  # not before the commit
        assert kicks_heard(listener, 5) == 1

        with pytest.raises(RuntimeError, match="the submit failed"):
            kick_then_fail()
        assert kicks_heard(listener, 0.5) == 0


@transaction.atomic
def kick_then_fail() -> None:
    wake.kick()
    raise RuntimeError("the submit failed")


@contextlib.contextmanager
def running_worker(settings: Any, tmp_path: Path, cycle_s: float) -> Iterator[subprocess.Popen[bytes]]:
    """`manage.py gridlane_worker` against the test database, a cycle every cycle_s, ready: the periodic cycle
    of its start and the listener's first admission have both run. Stopped by SIGTERM, and it must exit 0."""
    db = connection.settings_dict
    env = {
        **os.environ,
        "DATABASE_URL": f"postgres://{db['USER']}@{db['HOST']}:{db['PORT'] or 5432}/{db['NAME']}",
        "DJANGO_SETTINGS_MODULE": "tests.settings",
        "GRIDLANE_CYCLE_SECONDS": str(cycle_s),
        "GRIDLANE_LOCAL_FABRIC_ROOT": str(settings.GRIDLANE_LOCAL_FABRIC_ROOT),
    }
    log = tmp_path / "worker.log"
    with log.open("w") as out:
        worker = subprocess.Popen(
            [sys.executable, str(ROOT / "manage.py"), "gridlane_worker"], env=env, stdout=out, stderr=out,
            start_new_session=True,
        )  # fmt: skip
    try:
        wait_until(lambda: worker.poll() is None and cycles() >= 2 and listening(), timeout=60, every=0.2)
        yield worker
    finally:
        os.killpg(worker.pid, signal.SIGTERM)
        try:
            worker.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(worker.pid, signal.SIGKILL)
            worker.wait()
    assert worker.returncode == 0, log.read_text()[-3000:]


def test_the_worker_admits_a_submit_at_once_not_at_its_next_tick(transactional_db, alice, submit, settings, tmp_path):
    """The worker's tick is an hour: only the kick can admit the submit."""
    with running_worker(settings, tmp_path, cycle_s=3600):
        settings.GRIDLANE_KICK_WORKER = True
        workload = submit(alice, command="true")
        wait_until(lambda: Workload.objects.get(pk=workload.pk).admitted_at is not None, timeout=60)
        # The follow-up thread dispatches it too.
        wait_until(lambda: Workload.objects.get(pk=workload.pk).external_id != "", timeout=60)
        assert Workload.objects.get(pk=workload.pk).state in (State.DISPATCHING, State.RUNNING, State.SUCCEEDED)
        assert cycles() >= 3


def test_the_periodic_cycle_asks_the_listener_to_admit(transactional_db, alice, submit, settings, tmp_path):
    """A submit that sends no kick waits for the tick; where the listener runs, the tick's cycle asks it to admit
    (a kick of its own) rather than admitting in the cluster's process."""
    with running_worker(settings, tmp_path, cycle_s=0.5):
        workload = submit(alice, command="true")  # GRIDLANE_KICK_WORKER is off: no kick
        wait_until(lambda: Workload.objects.get(pk=workload.pk).external_id != "", timeout=60)
        # The cluster records a finished task a moment after it ran.
        wait_until(lambda: Task.objects.filter(name="cycle").exists(), timeout=60)
        ticks = [task.kwargs for task in Task.objects.filter(name="cycle")]
        assert all(kwargs == {"kick": True} for kwargs in ticks)


def test_a_cycle_that_kicks_syncs_then_leaves_admission_to_the_listener(transactional_db, alice, submit):
    with psycopg.connect(**connection.get_connection_params(), autocommit=True) as listener:
        listener.execute(f"LISTEN {wake.CHANNEL}")
        workload = submit(alice, command="true")

        summary = tasks.cycle(kick=True)
        assert summary["kicked"]
        assert "admitted" not in summary
        # admit and dispatch: the cycle has just brought status in
        assert [n.payload for n in listener.notifies(timeout=5, stop_after=1)] == [wake.ADMIT]
        assert Workload.objects.get(pk=workload.pk).state == State.PENDING

        summary = tasks.cycle()  # as where no listener runs (SQLite): the cycle admits and dispatches itself
        assert summary["admitted"] == 1
        assert summary["dispatched"] == 1
        assert kicks_heard(listener, 0.2) == 0


def cycles() -> float:
    row = WorkerStats.objects.filter(name="cycles").first()
    return row.value if row else 0


def listening() -> bool:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND query = %s",
            [f"LISTEN {wake.CHANNEL}"],
        )
        row = cursor.fetchone()
    return bool(row and row[0])


class Notifications:
    """A listening connection whose notifications the test hands it, each at a moment the test chooses (a real
    one receives them whenever PostgreSQL delivers, so "while the admission ran" could not be arranged)."""

    def __init__(self) -> None:
        import threading

        self.pending: list[str] = []
        self.arrived = threading.Condition()

    def send(self, payload: str) -> None:
        with self.arrived:
            self.pending.append(payload)
            self.arrived.notify_all()

    def __call__(self, **params: Any) -> Notifications:  # psycopg.connect
        return self

    def __enter__(self) -> Notifications:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def execute(self, statement: str, *args: Any) -> None:
        return None

    def notifies(self, timeout: float, stop_after: int | None = None) -> Any:
        with self.arrived:
            if timeout and not self.pending:
                self.arrived.wait(timeout)
            taken = self.pending[:stop_after] if stop_after else list(self.pending)
            del self.pending[: len(taken)]
        return [type("Notify", (), {"payload": p}) for p in taken]


def test_the_listener_rests_only_when_kicks_arrived_while_it_admitted(db, monkeypatch):
    """A kick that finds the listener idle (a lone submit, or the next of a client that waits for each
    admission) is admitted at once; kicks that arrive during an admission (a stream) wait for a rest as long
    as that admission took, and then share the next one. Nothing is lost either way."""
    import threading
    from types import SimpleNamespace

    conn = Notifications()
    # Only the listener's own connection is the test's (Django's connections stay real).
    monkeypatch.setattr(
        "portal.worker.wake.psycopg", SimpleNamespace(connect=conn, OperationalError=psycopg.OperationalError)
    )
    stop = threading.Event()
    calls: list[bool] = []
    rests: list[float] = []
    kick_during = {2}  # the second kick's admission sees another kick arrive

    def on_kick(sync: bool) -> None:
        calls.append(sync)
        if len(calls) - 1 in kick_during:
            conn.send(wake.EVERYTHING)

    listener = threading.Thread(target=wake.listen, args=(on_kick, stop, 0.05, rests.append), daemon=True)
    listener.start()
    try:
        wait_until(lambda: calls == [True])  # what arrived while nobody listened
        conn.send(wake.ADMIT)  # a lone submit's kick
        wait_until(lambda: len(calls) == 2)
        assert calls[1] is False
        assert rests == []
        conn.send(wake.ADMIT)  # another arrives while this one is admitted
        wait_until(lambda: len(calls) == 4)
        assert len(rests) == 1
        assert 0 <= rests[0] <= wake.MAX_REST_S
        assert calls[2:] == [False, True]  # the one that arrived meanwhile was taken after the rest, with its sync
        conn.send(wake.ADMIT)
        wait_until(lambda: len(calls) == 5)
        assert len(rests) == 1  # idle again: no rest
    finally:
        stop.set()
        listener.join(timeout=30)
