"""The agent's reporter: ends that come in while a report is on its way go together in the next one; a server
without the batch endpoint is told one job at a time; one that is away is asked again."""

from __future__ import annotations

import threading
from typing import Any

from fabrics.agent.client import ApiError
from fabrics.agent.reports import End, Reporter


class Server:
    """A stand-in for the portal's agent API: records each request, answers as told."""

    def __init__(self, batches: bool = True, away: int = 0) -> None:
        self.batches, self.away = batches, away
        self.requests: list[tuple[str, Any]] = []
        self.in_flight = threading.Event()
        self.hold = threading.Event()
        self.hold.set()

    def post(self, path: str, body: Any = None, timeout: float | None = None) -> Any:
        self.requests.append((path, body))
        self.in_flight.set()
        self.hold.wait(10)
        if self.away:
            self.away -= 1
            raise ApiError(0, "connection refused")
        if path == "agent/ends/" and not self.batches:
            raise ApiError(404, "Not Found")
        return {}


def test_ends_that_come_in_while_a_report_is_on_its_way_go_together_in_the_next():
    server = Server()
    server.hold.clear()
    reporter = Reporter(server, "host-1", pause_s=0)  # type: ignore[arg-type]
    reporter.end(End("r0", "succeeded", 0, ""))
    sending = threading.Thread(target=reporter.send_waiting, kwargs={"block": True})
    sending.start()
    assert server.in_flight.wait(10)
    for i in (1, 2, 3):
        reporter.end(End(f"r{i}", "failed", i, "", [{"at": "2026-11-30T10:00:00+00:00"}]))
    server.hold.set()
    sending.join(10)
    assert reporter.send_waiting() == 3
    assert [[r["run_id"] for r in body["runs"]] for _, body in server.requests] == [["r0"], ["r1", "r2", "r3"]]
    reading = {"at": "2026-11-30T10:00:00+00:00"}
    assert server.requests[1][1]["runs"][2] == {
        "run_id": "r3", "state": "failed", "exit_code": 3, "reason": "", "samples": [reading],
    }  # fmt: skip
    assert reporter.flush(1)


def test_a_server_without_the_batch_endpoint_is_told_one_job_at_a_time():
    server = Server(batches=False)
    reporter = Reporter(server, "host-1", pause_s=0)  # type: ignore[arg-type]
    reporter.end(End("r0", "succeeded", 0, "", [{"at": "2026-11-30T10:00:00+00:00"}]))
    reporter.end(End("r1", "cancelled", 143, "cancelled"))
    assert reporter.send_waiting() == 2
    assert [path for path, _ in server.requests] == [
        "agent/ends/", "agent/runs/r0/usage/", "agent/runs/r0/status/", "agent/runs/r1/status/",
    ]  # fmt: skip
    assert server.requests[3][1] == {"host": "host-1", "state": "cancelled", "exit_code": 143, "reason": "cancelled"}
    reporter.end(End("r2", "succeeded", 0, ""))
    reporter.send_waiting()
    assert server.requests[-1][0] == "agent/runs/r2/status/"  # it does not ask for the batch endpoint again


def test_a_server_that_is_away_is_asked_again_and_a_report_is_given_up_after_five_tries():
    server = Server(away=2)
    reporter = Reporter(server, "host-1", pause_s=0)  # type: ignore[arg-type]
    reporter.end(End("r0", "succeeded", 0, ""))
    reporter.send_waiting()
    assert [path for path, _ in server.requests] == ["agent/ends/"] * 3
    server.away = 10
    reporter.end(End("r1", "succeeded", 0, ""))
    reporter.send_waiting()
    assert len(server.requests) == 3 + 5
    assert reporter.flush(1)
