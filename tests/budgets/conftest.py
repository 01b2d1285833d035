"""Budgets' test helpers: work that ran for hours, rolled up as the worker rolls it up."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.utils import timezone

from portal.budgets import services
from portal.budgets.models import Budget
from portal.queues.models import Fabric
from portal.usage import rollup
from portal.workloads.models import Workload
from portal.workloads.states import State

T0 = datetime(2026, 12, 15, 12, 0, tzinfo=UTC)  # the middle of December: the month's window holds what ran today
HOUR = timedelta(hours=1)


def ran(
    submit: Any, user: Any, gpus: float, hours: float, *, until: datetime = T0, state: str = State.SUCCEEDED
) -> Any:
    """A workload of `gpus` GPUs that ran `hours` up to `until` (still running, where `state` says so), rolled up."""
    w = submit(user, gpus=gpus)
    started = until - timedelta(hours=hours)
    Workload.objects.filter(pk=w.pk).update(
        state=state, fabric=Fabric.objects.get(name="local"), submitted_at=started - timedelta(minutes=1),
        started_at=started, finished_at=None if state == State.RUNNING else until,
    )  # fmt: skip
    rollup.roll_up(started, until)
    return w


def set_budget(by: Any, team: Any, user: Any = None, **fields: Any) -> Budget:
    budget = Budget.objects.filter(team=team, user=user).first() or Budget(team=team, user=user)
    for name, value in fields.items():
        setattr(budget, name, value)
    services.check_set(by, budget)
    return services.do_set(by, budget, timezone.now())


@pytest.fixture
def at_t0() -> Any:
    import time_machine

    with time_machine.travel(T0, tick=True):
        yield
