"""The workload state machine: which state may follow which. Only services apply it."""

from __future__ import annotations

from collections.abc import Mapping

from django.db import models


class State(models.TextChoices):
    PENDING = "pending"
    ADMITTED = "admitted"
    DISPATCHING = "dispatching"
    RUNNING = "running"
    CANCELLING = "cancelling"
    PREEMPTED = "preempted"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"
    EXPIRED = "expired"


FINISHED = frozenset({State.SUCCEEDED, State.FAILED, State.CANCELLED, State.EXPIRED})
# Holding (or about to hold) capacity on a fabric.
ACTIVE = frozenset({State.ADMITTED, State.DISPATCHING, State.RUNNING, State.CANCELLING})

TRANSITIONS: Mapping[State, frozenset[State]] = {
    # An array's parent is never scheduled: it waits while its elements run, and settles when the last one ends.
    State.PENDING: frozenset({State.ADMITTED, State.CANCELLED, State.SUCCEEDED, State.FAILED}),
    # An admitted workload has nothing on a fabric yet, so it can still be taken back or cancelled outright.
    State.ADMITTED: frozenset({State.DISPATCHING, State.PENDING, State.CANCELLED}),
    # Straight to cancelled from dispatching or running: someone cancelled the job on the fabric itself.
    State.DISPATCHING: frozenset(
        {
            State.RUNNING,
            State.SUCCEEDED,
            State.FAILED,
            State.EXPIRED,
            State.CANCELLED,
            State.CANCELLING,
            State.PREEMPTED,
        }
    ),
    State.RUNNING: frozenset(
        {State.SUCCEEDED, State.FAILED, State.EXPIRED, State.CANCELLED, State.CANCELLING, State.PREEMPTED}
    ),
    State.CANCELLING: frozenset({State.CANCELLED, State.SUCCEEDED, State.FAILED, State.EXPIRED}),
    # Preempted: its fabric job is being stopped; then it waits again (or it had just succeeded anyway).
    # A cancel meanwhile goes through cancelling, so the job is still stopped.
    State.PREEMPTED: frozenset({State.PENDING, State.SUCCEEDED, State.CANCELLING}),
    State.SUCCEEDED: frozenset(),
    State.FAILED: frozenset(),
    State.CANCELLED: frozenset(),
    State.EXPIRED: frozenset(),
}


def can_move(old: str, new: str) -> bool:
    return State(new) in TRANSITIONS[State(old)]
