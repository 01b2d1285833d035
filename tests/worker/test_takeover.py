"""A worker killed while it holds the scheduling and dispatch locks keeps nothing stuck: the locks die with its
database session, and the other worker's first cycle after that admits and dispatches everything waiting.
"Within one cycle" is counted in cycles, not seconds: one call of the cycle, once the dead session is gone.
(tests/deploy/test_two_workers.py shows the same end to end, with two real workers and 300 submissions.)"""

from __future__ import annotations

import signal
import subprocess
import sys
from typing import Any

import psycopg
import pytest
from django.db import connection

from portal.worker import tasks
from portal.workloads.models import Workload
from portal.workloads.states import State
from tests.conftest import wait_until

pytestmark = pytest.mark.django_db(transaction=True)

STEPS = ("scheduling-cycle", "dispatch", "sync")

# A stand-in for a worker in the middle of its cycle: it takes the steps' advisory locks (the keys
# portal.worker.lock derives from the names: if they drift, the first asserts below fail), says so, and waits.
HOLDER = """
import sys, zlib, psycopg
conn = psycopg.connect(sys.argv[1], autocommit=True)
for name in sys.argv[2:]:
    assert conn.execute("SELECT pg_try_advisory_lock(%s)", [zlib.crc32(name.encode())]).fetchone()[0]
print("held", conn.info.backend_pid, flush=True)
sys.stdin.read()
"""


def holds_advisory_locks(pid: int) -> bool:
    """Whether that server process still holds advisory locks (only its own: pg_locks lists every database's,
    and another test run or worker on the same server holds its own)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = %s", [pid])
        return bool(cursor.fetchone()[0])


def test_the_first_cycle_after_a_worker_dies_holding_the_locks_does_all_the_waiting_work(alice, submit, local_jobs):
    for i in range(3):
        submit(alice, name=f"w{i}", command="true")
    params: dict[str, Any] = connection.get_connection_params()
    dsn = psycopg.conninfo.make_conninfo(**{k: v for k, v in params.items() if k in ("dbname", "user", "host", "port")})
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, dsn, *STEPS], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True, start_new_session=True)  # fmt: skip
    try:
        assert holder.stdout is not None
        said, pid = holder.stdout.readline().split()
        assert said == "held"
        assert holds_advisory_locks(int(pid))
        # While it lives, its locks hold: a cycle admits nothing and dispatches nothing.
        assert tasks.admit(wait_s=0) == {"skipped": True}
        assert tasks.dispatch() == 0
        assert set(Workload.objects.values_list("state", flat=True)) == {State.PENDING}

        holder.send_signal(signal.SIGKILL)  # as the OOM killer would: no goodbye
        holder.wait(timeout=30)
        wait_until(lambda: not holds_advisory_locks(int(pid)))  # the server notices the dead session
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()

    summary = tasks.cycle()  # one cycle
    assert summary["admitted"] == 3
    assert summary["dispatched"] == 3
    assert not Workload.objects.filter(state__in=[State.PENDING, State.ADMITTED]).exists()
