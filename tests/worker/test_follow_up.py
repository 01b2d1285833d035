"""The follow-up after a kick: it always dispatches; it brings status in (a sync, which polls every fabric for
all its live work) when a kick asked for it (a cancel) or when its last sync is FOLLOW_UP_SYNC_S old, so that a
stream of submits does not poll a growing backlog once per submit. Under a clock the test moves."""

from __future__ import annotations

from typing import Any

import pytest

from portal.worker import tasks


@pytest.fixture
def steps(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """What the follow-up ran, in order (the steps themselves are tested where they live)."""
    ran: list[str] = []

    def dispatch() -> int:
        ran.append("dispatch")
        return 0

    def sync_fabrics() -> int:
        ran.append("sync")
        return 0

    monkeypatch.setattr(tasks, "dispatch", dispatch)
    monkeypatch.setattr(tasks, "sync_fabrics", sync_fabrics)
    return ran


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_the_first_follow_up_syncs_and_submits_right_after_it_only_dispatch(steps: list[str]) -> None:
    clock = Clock()
    follow = tasks.FollowUp(clock)
    follow.ask(False)
    follow.run()
    assert steps == ["dispatch", "sync"]  # the last sync is long past: a lone submit starts promptly
    for _ in range(3):
        clock.now += tasks.FOLLOW_UP_SYNC_S / 4
        follow.ask(False)
        follow.run()
    assert steps == ["dispatch", "sync", "dispatch", "dispatch", "dispatch"]
    clock.now += tasks.FOLLOW_UP_SYNC_S / 4  # a whole FOLLOW_UP_SYNC_S since the sync
    follow.ask(False)
    follow.run()
    assert steps[-2:] == ["dispatch", "sync"]


def test_a_cancel_in_a_burst_of_submits_gets_its_sync_at_once(steps: list[str]) -> None:
    clock = Clock()
    follow = tasks.FollowUp(clock)
    follow.run()
    steps.clear()
    for sync in (False, True, False):  # three kicks heard before the follow-up thread came round
        follow.ask(sync)
    clock.now += 0.01
    follow.run()
    assert steps == ["dispatch", "sync"]
    follow.ask(False)
    follow.run()
    assert steps == ["dispatch", "sync", "dispatch"]  # the cancel's request was used up by its round


def test_a_follow_up_that_fails_leaves_the_request_for_a_sync_to_the_periodic_cycle(
    steps: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A failed round is not remembered as a sync: the next kick's round syncs if its time has come."""
    clock = Clock()
    follow = tasks.FollowUp(clock)

    def broken(*_: Any) -> int:
        raise RuntimeError("the database went away")

    monkeypatch.setattr(tasks, "dispatch", broken)
    with pytest.raises(RuntimeError):
        follow.run()
    monkeypatch.undo()
    assert follow.synced_at == float("-inf")


def test_the_listener_rests_a_few_times_as_long_as_an_admission_took_and_never_long() -> None:
    from portal.worker import wake

    # A stream's next admission takes what came meanwhile; admitting takes at most 1 / (1 + STREAM_REST) of a core.
    assert wake.rest_after(0.03) == pytest.approx(0.03 * wake.STREAM_REST)
    assert wake.STREAM_REST >= 1
    assert wake.rest_after(5.0) == wake.MAX_REST_S  # a slow admission never holds the next kick long
    assert wake.rest_after(-1.0) == 0.0  # a clock stepped back
