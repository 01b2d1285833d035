"""The worker's garbage-collector policy around decide() (which leaves the collector alone)."""

from __future__ import annotations

import gc

import pytest

from portal.worker import tasks


@pytest.mark.django_db
def test_an_admission_leaves_the_collector_on_with_the_heap_before_it_frozen(
    alice, submit, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before a process's first decision the worker collects and freezes what is alive (once per process); the
    collector stays on for every thread, during the decision too."""
    submit(alice, command="true")
    seen: list[bool] = []
    from scheduler import decide

    def watched(snapshot):
        seen.append(gc.isenabled())
        return decide(snapshot)

    monkeypatch.setattr(tasks, "decide", watched)
    tasks.admit()
    assert seen == [True]  # one round: one decision, with the collector on
    assert gc.isenabled()
    assert gc.get_freeze_count() > 0
    frozen = gc.get_freeze_count()
    tasks.admit()
    assert gc.get_freeze_count() <= frozen  # once: later admissions freeze nothing more
