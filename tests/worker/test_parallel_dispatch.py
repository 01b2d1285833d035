"""One dispatch in flight per fabric: a slow fabric holds up only its own work. The fabrics here are stand-ins
that block on events, so every test says what happened while one of them was stuck, never how long it took."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from django.db import connection

from portal.queues.models import Fabric
from portal.worker import dispatch
from portal.workloads.models import Workload
from portal.workloads.states import State
from tests.conftest import wait_until

WAIT_S = 30  # only ever reached when the code under test is wrong


class StandIn:
    """A fabric whose first submit calls `gate()` first (blocking, say, until the test lets it go)."""

    def __init__(self, gate: Any = None) -> None:
        self.gate = gate
        self.entered = threading.Event()
        self.submitted: list[str] = []

    def render(self, job: Any) -> str:
        return f"run {job.workload_id}"

    def find(self, workload_id: Any) -> str | None:
        return None

    def submit(self, job: Any) -> str:
        if not self.entered.is_set():
            self.entered.set()
            if self.gate is not None:
                self.gate()
        self.submitted.append(str(job.workload_id))
        return f"job-{job.workload_id}"


@pytest.fixture
def two_fabrics(transactional_db, alice, submit, monkeypatch):
    """Fabrics `slow` and `quick`, two admitted workloads on each (the slow one's admitted first, so that a
    dispatch one fabric after another would start with it), and the stand-in each dispatch talks to."""
    rows = {
        name: Fabric.objects.create(name=name, kind="local", gpus_milli=0, cpus_milli=64000, memory_mib=65536)
        for name in ("slow", "quick")
    }
    placed: dict[str, list[Workload]] = {}
    for name in ("slow", "quick"):
        placed[name] = []
        for i in range(2):
            w = submit(alice, name=f"{name}-{i}", command="true")
            Workload.objects.filter(pk=w.pk).update(state=State.ADMITTED, fabric=rows[name])
            placed[name].append(w)
    stand_ins: dict[str, StandIn] = {}
    monkeypatch.setattr(dispatch, "fabric_for", lambda row: stand_ins[row.name])
    yield stand_ins, placed
    Workload.objects.all().delete()


def external_ids(workloads: list[Workload]) -> list[str]:
    return [Workload.objects.get(pk=w.pk).external_id for w in workloads]


def in_background(outcome: dict[str, Any]) -> threading.Thread:
    def run() -> None:
        try:
            outcome["dispatched"] = dispatch.dispatch_all()
        except Exception as error:
            outcome["error"] = error
        finally:
            connection.close()

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def test_a_fabric_stuck_in_its_submit_does_not_hold_up_another(two_fabrics):
    stand_ins, placed = two_fabrics
    let_go = threading.Event()
    stand_ins["slow"] = StandIn(gate=lambda: let_go.wait(WAIT_S))
    stand_ins["quick"] = StandIn()
    outcome: dict[str, Any] = {}
    thread = in_background(outcome)
    try:
        assert stand_ins["slow"].entered.wait(WAIT_S)
        # While the slow fabric's submit is stuck, the quick one's work reaches it and is recorded.
        wait_until(lambda: all(external_ids(placed["quick"])), timeout=WAIT_S)
        assert external_ids(placed["slow"]) == ["", ""]
        assert all(Workload.objects.get(pk=w.pk).state == State.DISPATCHING for w in placed["slow"])  # intent first
    finally:
        let_go.set()
        thread.join(WAIT_S)
    assert outcome == {"dispatched": 4}
    assert external_ids(placed["slow"]) == [f"job-{w.pk}" for w in placed["slow"]]


def test_two_fabrics_are_in_flight_at_once(two_fabrics):
    """Each fabric's first submit waits until the other's has begun: only dispatches that run side by side
    get past it (one after another, the first would wait for good)."""
    stand_ins, placed = two_fabrics
    both = threading.Barrier(2, timeout=WAIT_S)
    stand_ins["slow"] = StandIn(gate=both.wait)
    stand_ins["quick"] = StandIn(gate=both.wait)
    outcome: dict[str, Any] = {}
    in_background(outcome).join(WAIT_S * 2)
    assert outcome == {"dispatched": 4}
    assert all(external_ids(placed["slow"] + placed["quick"]))


def test_a_fabric_that_fails_leaves_the_others_dispatched_and_its_error_raised(two_fabrics):
    stand_ins, placed = two_fabrics

    def broken() -> None:
        raise RuntimeError("the adapter broke")

    stand_ins["slow"] = StandIn(gate=broken)
    stand_ins["quick"] = StandIn()
    outcome: dict[str, Any] = {}
    in_background(outcome).join(WAIT_S)
    assert str(outcome["error"]) == "the adapter broke"
    assert all(external_ids(placed["quick"]))
    # Its intent was recorded before anything left: the next dispatch finds its work and sends it.
    assert external_ids(placed["slow"]) == ["", ""]
    stand_ins["slow"] = StandIn()
    assert dispatch.dispatch_all() == 2
    assert external_ids(placed["slow"]) == [f"job-{w.pk}" for w in placed["slow"]]
