"""The worker asks a notebook's Jupyter server how it is used where the fabric cannot (Slurm, PBS): at the
address the job reported, with its token, within a budget per cycle that a hung server cannot outlast.

The servers here are small loopback HTTP servers that answer as Jupyter's status API does (or never answer);
the live test on the Slurm cluster asks a real one (tests/fabrics/slurm/test_notebook_live.py)."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from fabrics import jupyter
from fabrics.base import Endpoint, JobState, JobStatus
from portal.queues.models import Queue
from portal.worker import idle
from portal.workloads.models import Workload

TOKEN = "c2VjcmV0LXRva2VuLW9mLXRoZS1zZXJ2ZXI"
LAST_USE = datetime(2026, 5, 4, 12, 0, tzinfo=UTC)


class Jupyter(ThreadingHTTPServer):
    """Answers GET /api/status as a Jupyter server would, to the right token only; counts what it was asked."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.asked: list[str] = []

    @property
    def port(self) -> int:
        return int(self.server_address[1])


class _Handler(BaseHTTPRequestHandler):
    server: Jupyter

    def do_GET(self) -> None:
        self.server.asked.append(self.headers.get("Authorization", ""))
        if self.path != "/api/status" or self.headers.get("Authorization") != f"token {TOKEN}":
            self.send_error(403)
            return
        body = json.dumps({"started": "2026-05-04T11:00:00Z", "last_activity": "2026-05-04T12:00:00.000000Z",
                           "kernels": 0, "connections": 0}).encode()  # fmt: skip
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def server() -> Iterator[Jupyter]:
    jupyter_server = Jupyter()
    thread = threading.Thread(target=jupyter_server.serve_forever, daemon=True)
    thread.start()
    yield jupyter_server
    jupyter_server.shutdown()
    jupyter_server.server_close()


@pytest.fixture
def hung() -> Iterator[list[int]]:
    """Ports where a connection is taken (the kernel's backlog) and no answer ever comes."""
    sockets = []
    for _ in range(5):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        s.listen(8)
        sockets.append(s)
    yield [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()


def notebook(port: int, token: str = TOKEN, idle_minutes: int | None = 8, **fields: Any) -> Workload:
    """A running notebook (unsaved: nothing here reads the database) whose job reported its server, on the
    node its fabric says it runs on (this host)."""
    queue = Queue(slug="hpc-nb", notebook_idle_minutes=idle_minutes)
    server = {"host": "127.0.0.1", "port": port, "token": token}
    return Workload(queue=queue, kind="notebook", notebook_endpoint=server, **({"host": "localhost"} | fields))


RUNNING = JobStatus(JobState.RUNNING, host="node17")


def test_the_worker_asks_the_reported_server_with_its_token(server):
    asked = idle.ask_server(notebook(server.port), RUNNING, jupyter.Budget())
    assert asked.last_activity == LAST_USE
    assert server.asked == [f"token {TOKEN}"]


@pytest.mark.parametrize(
    ("case", "workload", "status"),
    [
        ("the fabric knows the use", lambda port: notebook(port), JobStatus(JobState.RUNNING, last_activity=LAST_USE)),
        ("no reported server", lambda port: Workload(queue=Queue(notebook_idle_minutes=8)), RUNNING),
        ("its queue stops no idle notebook", lambda port: notebook(port, idle_minutes=None), RUNNING),
    ],
)
def test_the_server_is_not_asked_when_the_answer_would_change_nothing(server, case, workload, status):
    assert idle.ask_server(workload(server.port), status, jupyter.Budget()) == status
    assert server.asked == []


def test_a_notebook_whose_warning_stands_is_asked_even_when_its_queue_dropped_the_limit(server):
    w = notebook(server.port, idle_minutes=None, idle_stop_at=LAST_USE + timedelta(minutes=8))
    assert idle.ask_server(w, RUNNING, jupyter.Budget()).last_activity == LAST_USE


def test_a_wrong_token_or_no_server_leaves_the_status_as_it_was(server, hung):
    assert idle.ask_server(notebook(server.port, token="x" * 32), RUNNING, jupyter.Budget()) == RUNNING
    assert server.asked == ["token " + "x" * 32]
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]  # bound, not listening: refused
    assert idle.ask_server(notebook(closed), RUNNING, jupyter.Budget()) == RUNNING
    assert idle.ask_server(notebook(hung[0]), RUNNING, jupyter.Budget(per_probe_s=0.2)) == RUNNING


def test_hung_servers_cost_a_cycle_its_budget_and_no_more(hung, server, monkeypatch):
    budget = jupyter.Budget(seconds=1.0, per_probe_s=0.4)
    timeouts: list[float] = []
    probe = jupyter.probe

    def counted(server: Endpoint, timeout: float) -> tuple[bool, datetime | None]:
        timeouts.append(timeout)
        return probe(server, timeout)

    monkeypatch.setattr(jupyter, "probe", counted)
    started = time.monotonic()
    answers = [idle.ask_server(notebook(port), RUNNING, budget) for port in hung]  # 0.4 + 0.4 + 0.2, then none
    answers.append(idle.ask_server(notebook(server.port), RUNNING, budget))
    elapsed = time.monotonic() - started
    assert answers == [RUNNING] * 6
    assert budget.spent
    assert server.asked == []  # asked next cycle, with a fresh budget
    # A hung server keeps its probe for the whole timeout, so however slow the machine, at most three
    # probes (0.4 + 0.4 + what is left) fit in the second, each given no more than what was left.
    assert 1 <= len(timeouts) <= 3
    assert timeouts[0] == 0.4
    assert sum(timeouts) <= 1.0 + 1e-9
    assert elapsed >= 0.9
    assert idle.ask_server(notebook(server.port), RUNNING, jupyter.Budget()).last_activity == LAST_USE


@pytest.mark.parametrize("reported", ["127.0.0.1", "2130706433", "127.1", "::ffff:127.0.0.1", "localhost"])
def test_a_server_off_the_notebooks_node_is_never_asked(server, reported):
    w = notebook(server.port, host="node17.hpc.example.org")  # the fabric says it runs elsewhere
    w.notebook_endpoint = {"host": reported, "port": server.port, "token": TOKEN}
    assert idle.ask_server(w, RUNNING, jupyter.Budget()) == RUNNING
    assert server.asked == []
