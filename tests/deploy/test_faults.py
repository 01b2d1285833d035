"""PostgreSQL stopped for about 10 s under load, then started again: two web processes (gunicorn, as deployed)
answer 503 JSON with Retry-After meanwhile and recover without a failed request or a restart; the worker rides
the outage out and carries on by itself; nothing submitted before, during or after is lost or run twice.

The server is the test's own (tests/deploy/postgres.py): its own data directory and port."""

from __future__ import annotations

import json
import time

import pytest

from tests.deploy.helpers import ROOT, free_port, get, gunicorn, manage, production_env, stop, wait_for
from tests.deploy.load import Load
from tests.deploy.postgres import private_postgres, psql

pytestmark = pytest.mark.slow

OUTAGE_S = 10.0


def test_a_database_outage_under_load_answers_503_then_recovers_and_loses_nothing(tmp_path):
    with private_postgres() as pg:
        url = pg.create_database()
        env = production_env(url, tmp_path / "var", GRIDLANE_SUBMIT_RATE_LIMIT="100000",
                             GRIDLANE_LOCAL_FABRIC_ROOT=str(tmp_path / "jobs"), GRIDLANE_CYCLE_SECONDS="1")  # fmt: skip
        for step in (["migrate", "--no-input"], ["seed_demo"]):
            result = manage(env, *step)
            assert result.returncode == 0, result.stderr
        token = manage(env, "issue_token", "alice").stdout.strip().splitlines()[-1]
        marker = tmp_path / "ran"

        ports = [free_port(), free_port()]
        worker_log = (tmp_path / "worker.log").open("wb")
        import subprocess
        import sys

        worker = subprocess.Popen([sys.executable, str(ROOT / "manage.py"), "gridlane_worker"], env=env, cwd=ROOT,
                                  stdout=worker_log, stderr=subprocess.STDOUT, start_new_session=True)  # fmt: skip
        try:
            with gunicorn(env, ports[0], tmp_path / "web-1.log"), gunicorn(env, ports[1], tmp_path / "web-2.log"):
                load = Load(ports, token, marker)
                for thread in load.threads:
                    thread.start()
                wait_for(lambda: load.taken_count() >= 20, "20 submissions before the outage", timeout=300)

                down_at = time.time()
                pg.stop("fast")
                wait_for(lambda: any(a.started > down_at and a.status == 503 for a in load.attempts), "a 503")
                status, _, body = get(f"http://127.0.0.1:{ports[0]}/readyz")
                assert status == 503
                assert json.loads(body)["checks"]["database"]["ok"] is False
                assert get(f"http://127.0.0.1:{ports[1]}/healthz")[0] == 200  # alive: nothing to restart
                time.sleep(max(0.0, down_at + OUTAGE_S - time.time()))
                during = load.taken_count()

                pg.start()
                up_at = time.time()
                wait_for(lambda: load.taken_count() >= during + 40, "40 submissions after the outage", timeout=300)
                load.stopping.set()
                for thread in load.threads:
                    thread.join(timeout=120)
                assert worker.poll() is None, "the worker exited"

                # Every submission taken ran, once: none lost, none twice.
                ids = set(load.taken.values())
                assert len(ids) == len(load.taken)  # one workload per submission key
                wait_for(lambda: psql(url, "SELECT count(*) FROM workloads_workload WHERE state = 'succeeded'")[0][0]
                         >= len(ids), "every workload to succeed", timeout=600)  # fmt: skip
                rows = psql(url, "SELECT id::text, name, state FROM workloads_workload")
                assert {r[0] for r in rows} == ids
                assert {r[2] for r in rows} == {"succeeded"}
                assert sorted(r[1] for r in rows) == sorted(load.taken)
                ran = marker.read_text().split()
                assert sorted(ran) == sorted(ids)

                attempts = sorted(load.attempts, key=lambda a: a.started)
                assert {a.status for a in attempts} <= {200, 201, 503}, {a.status for a in attempts}
                refused = [a for a in attempts if a.status == 503]
                assert refused
                assert all(a.json_errors and a.retry_after == "5" and a.request_id for a in refused)
                assert all(a.started < up_at for a in refused), "a request failed after the database was back"
                back = min(a.ended for a in attempts if a.started >= up_at and a.status in (200, 201))
                admitted = psql(url, "SELECT min(admitted_at) FROM workloads_workload WHERE admitted_at > "
                                     "to_timestamp(%s)", (up_at,))[0][0]  # fmt: skip
                logs = (tmp_path / "web-1.log").read_text() + (tmp_path / "web-2.log").read_text()
                assert f"[{refused[0].request_id}]" in logs  # every 5xx is logged, with its request id
                assert "Service Unavailable: /api/v1/workloads/" in logs
                print(
                    f"\nfaults: {len(ids)} submissions taken ({during} before and during a {OUTAGE_S:g} s outage), "
                    f"lost 0, run twice 0; {len(refused)} answers were 503 meanwhile, none after; the first submission "
                    f"after the restart was answered {back - up_at:.2f} s after PostgreSQL accepted connections, and "
                    f"the worker admitted again {admitted.timestamp() - up_at:.2f} s after"
                )
        finally:
            stop(worker)
            worker_log.close()
