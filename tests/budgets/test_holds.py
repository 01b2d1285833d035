"""Budgets in the worker: work is held at a spent budget with its own reason and released when IT raises it; a
member's spend is part of the team's, never added twice; an agent identity's budget holds only its work."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest

from portal.budgets import step
from portal.budgets.models import Budget
from portal.usage import report
from portal.worker import tasks
from portal.workloads.models import Workload
from portal.workloads.states import State
from scheduler import reasons
from tests.budgets.conftest import HOUR, T0, ran, set_budget

pytestmark = pytest.mark.usefixtures("at_t0")


def state_of(w: Workload) -> Workload:
    return Workload.objects.get(pk=w.pk)


def test_work_waits_at_a_spent_team_budget_with_its_reason_and_starts_when_it_raises_it(
    alice, bob, it_admin, vision, submit
):
    ran(submit, alice, gpus=2, hours=4)  # 8 GPU-hours
    running = ran(submit, bob, gpus=1, hours=2, until=T0 + timedelta(minutes=1), state=State.RUNNING)  # 2 so far
    budget = set_budget(it_admin, vision, gpu_hours=10)
    assert budget.spent_gpu_hours == pytest.approx(10.0, abs=0.05)
    assert budget.held_reason.startswith("held: the team's GPU-hour budget in vision for December 2026 is spent (10")
    waiting = submit(alice, gpus=1)
    tasks.admit()
    held = state_of(waiting)
    assert held.state == State.PENDING
    assert held.pending_reason_code == reasons.BUDGET_SPENT
    assert held.pending_reason == budget.held_reason
    assert "a lead or IT can raise it" in held.pending_reason
    assert state_of(running).state == State.RUNNING  # a budget never stops running work

    set_budget(it_admin, vision, gpu_hours=20)
    assert Budget.objects.get(pk=budget.pk).held_reason == ""
    tasks.admit()
    assert state_of(waiting).state == State.ADMITTED


def test_a_members_spend_is_part_of_the_teams_never_added_to_it(alice, bob, it_admin, vision, submit):
    ran(submit, alice, gpus=2, hours=2)  # 4 GPU-hours
    ran(submit, bob, gpus=1, hours=2)  # 2
    team = set_budget(it_admin, vision, gpu_hours=100)
    hers = set_budget(bob, vision, alice, gpu_hours=50)
    step.step(T0)
    team.refresh_from_db()
    hers.refresh_from_db()
    assert hers.spent_gpu_hours == pytest.approx(4.0)
    assert team.spent_gpu_hours == pytest.approx(6.0)  # alice's 4 and bob's 2, once each
    period = report.Period(T0.replace(day=1, hour=0), T0 + HOUR, None)
    assert report.team_usage(vision, period)["totals"]["allocated_gpu_hours"] == pytest.approx(team.spent_gpu_hours)


def test_a_members_spent_budget_holds_her_work_only(alice, bob, vision, submit):
    ran(submit, alice, gpus=1, hours=3)
    set_budget(bob, vision, alice, gpu_hours=3)
    hers, his = submit(alice, gpus=1), submit(bob, gpus=1)
    tasks.admit()
    assert state_of(hers).pending_reason.startswith("held: alice's GPU-hour budget in vision")
    assert state_of(his).state == State.ADMITTED


def test_an_agent_identitys_budget_holds_the_agents_work_and_nobody_elses(alice, bob, vision, agent, submit):
    ran(submit, agent.user, gpus=1, hours=2)
    budget = set_budget(bob, vision, agent.user, gpu_hours=1.5)
    assert budget.scope == Budget.Scope.AGENT
    assert budget.held_reason.startswith("held: the agent svc.vision-bot's GPU-hour budget")
    theirs, hers = submit(agent.user, gpus=1), submit(alice, gpus=1)
    tasks.admit()
    assert state_of(theirs).pending_reason_code == reasons.BUDGET_SPENT
    assert state_of(hers).state == State.ADMITTED


def test_a_money_budget_counts_the_cost_at_the_fabrics_price(alice, it_admin, vision, submit):
    from decimal import Decimal

    from portal.queues.models import Fabric

    Fabric.objects.filter(name="local").update(gpu_hour_price=Decimal("2.5"))
    ran(submit, alice, gpus=2, hours=2)  # 4 GPU-hours at 2.50
    budget = set_budget(it_admin, vision, money=Decimal("10"))
    assert budget.spent_cost == pytest.approx(10.0, abs=0.5)
    assert "money budget" in budget.held_reason


def test_the_step_takes_the_same_queries_for_one_budget_or_many(
    alice, bob, it_admin, vision, agent, submit, django_assert_num_queries
):
    ran(submit, alice, gpus=1, hours=1)
    set_budget(it_admin, vision, gpu_hours=100)
    with django_assert_num_queries(5):  # the budgets, the team rollups, the figures; nothing crossed; the sweep (2)
        step.step(T0)
    set_budget(bob, vision, alice, gpu_hours=50)
    set_budget(bob, vision, agent.user, gpu_hours=50)
    with django_assert_num_queries(6):  # and the member rollups, for the member's and the agent's alike
        step.step(T0)


def test_a_held_backlog_leaves_the_slice_so_the_rest_of_the_team_starts_and_comes_back_when_released(
    alice, bob, it_admin, vision, agent, submit, settings
):
    """Two candidates per team, queue and tier: the agent's three held jobs would fill vision's slice for ever;
    once told they are held they leave it, and alice's later job starts. Raised, they are in the line again."""
    settings.GRIDLANE_CANDIDATES_PER_QUEUE = 2
    ran(submit, agent.user, gpus=1, hours=2)
    set_budget(bob, vision, agent.user, gpu_hours=Decimal(1))
    backlog = [submit(agent.user, gpus=0) for _ in range(3)]
    hers = submit(alice, gpus=0)
    for _ in range(3):
        tasks.admit()
    assert [state_of(w).pending_reason_code for w in backlog] == [reasons.BUDGET_SPENT] * 3
    assert state_of(hers).state == State.ADMITTED
    set_budget(bob, vision, agent.user, gpu_hours=Decimal(5))
    assert [state_of(w).pending_reason_code for w in backlog] == [""] * 3
    for _ in range(2):
        tasks.admit()
    assert [state_of(w).state for w in backlog] == [State.ADMITTED] * 3
