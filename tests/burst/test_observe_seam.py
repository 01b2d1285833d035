"""A burst pool asks a fabric at once through its own seam (portal.burst.observe), which the worker fills."""

from __future__ import annotations

from portal.burst import observe
from portal.worker import capacity


def test_the_worker_registers_its_capacity_step_as_the_burst_pools_observer():
    assert observe._observer is capacity.observe


def test_with_no_observer_asking_does_nothing():
    asked: list[object] = []
    try:
        observe.register(None)
        observe.now(object(), object())  # type: ignore[arg-type]
        observe.register(lambda fabric, at: asked.append((fabric, at)))
        observe.now("f", "t")  # type: ignore[arg-type]
    finally:
        observe.register(capacity.observe)
    assert asked == [("f", "t")]
