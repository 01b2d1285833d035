"""The state machine: every allowed transition works through the service, every other one is refused."""

from __future__ import annotations

from typing import Any

import pytest

from portal.workloads import services
from portal.workloads.models import Workload, WorkloadEvent
from portal.workloads.states import FINISHED, TRANSITIONS, State

ALLOWED = [(old, new) for old, news in TRANSITIONS.items() for new in sorted(news)]
REFUSED = [(old, new) for old in State for new in State if new not in TRANSITIONS[old]]


def workload_in(state: State, alice: Any, submit: Any) -> Workload:
    workload = submit(alice)
    Workload.objects.filter(pk=workload.pk).update(state=state)
    workload.refresh_from_db()
    return workload


@pytest.mark.parametrize(("old", "new"), ALLOWED, ids=[f"{o}->{n}" for o, n in ALLOWED])
def test_an_allowed_transition_moves_the_state_and_writes_an_event(old, new, alice, submit):
    workload = workload_in(old, alice, submit)
    assert services.transition(workload, new, actor=alice, reason="because")
    workload.refresh_from_db()
    assert workload.state == new
    event = WorkloadEvent.objects.filter(workload=workload).last()
    assert (event.from_state, event.to_state, event.reason, event.actor) == (old, new, "because", alice)
    if new in FINISHED:
        assert workload.finished_at is not None
    if new == State.RUNNING:
        assert workload.started_at is not None


@pytest.mark.parametrize(("old", "new"), REFUSED, ids=[f"{o}->{n}" for o, n in REFUSED])
def test_any_other_transition_is_refused(old, new, alice, submit):
    workload = workload_in(old, alice, submit)
    with pytest.raises(services.InvalidTransition):
        services.transition(workload, new)
    workload.refresh_from_db()
    assert workload.state == old


def test_finished_states_lead_nowhere():
    assert all(not TRANSITIONS[s] for s in FINISHED)


def test_the_compare_and_swap_that_loses_the_race_changes_nothing(alice, submit):
    workload = submit(alice)
    stale = Workload.objects.get(pk=workload.pk)  # a second process read it as pending, too
    assert services.transition(workload, State.CANCELLED, reason="user cancelled")
    events_before = WorkloadEvent.objects.filter(workload=workload).count()

    assert not services.transition(stale, State.ADMITTED, reason="worker admitted")

    workload.refresh_from_db()
    assert workload.state == State.CANCELLED
    assert workload.admitted_at is None
    assert WorkloadEvent.objects.filter(workload=workload).count() == events_before
