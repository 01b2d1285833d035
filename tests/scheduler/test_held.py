"""Budgets in the scheduler: work a spent budget holds waits with the budget's reason; running work and other
scopes go on as before."""

from __future__ import annotations

from scheduler import decide
from scheduler import reasons as r
from tests.scheduler.shapes import FRAUD, POOL, VISION, fabric, gpu_jobs, reserve, running_on, snapshot

SPENT = r.budget_spent("held: the team's GPU-hour budget for December is spent (1,000 of 1,000 GPU-h)")


def test_a_spent_team_budget_holds_its_pending_work_and_leaves_its_running_work_and_other_teams_alone():
    running = running_on(POOL, gpu_jobs(VISION, 2, name="old"))
    pending = gpu_jobs(VISION, 3) + gpu_jobs(FRAUD, 2)
    decisions = decide(snapshot([fabric(POOL, 8)], pending, running, held={(VISION, 0): SPENT}))
    assert sorted(a.job_id for a in decisions.admit) == ["fraud-0", "fraud-1"]
    assert not decisions.preempt
    waiting = {w.job_id: w for w in decisions.waiting}
    assert sorted(waiting) == ["vision-0", "vision-1", "vision-2"]
    assert {w.reason for w in waiting.values()} == {SPENT}
    assert all(w.estimated_start is None for w in waiting.values())
    assert [waiting[f"vision-{i}"].position for i in range(3)] == [1, 2, 3]


def test_a_held_team_holds_no_capacity_for_its_reservation():
    """Its reservation is no demand while it is held: another team borrows the whole fabric."""
    held = snapshot(
        [fabric(POOL, 4)], gpu_jobs(VISION, 4) + gpu_jobs(FRAUD, 4), quotas=[reserve(VISION, POOL, 4)],
        held={(VISION, 0): SPENT},
    )  # fmt: skip
    assert sorted(a.job_id for a in decide(held).admit) == [f"fraud-{i}" for i in range(4)]


def test_a_members_budget_holds_only_her_work_and_an_agents_holds_its_work_in_any_team():
    alice, bob, agent = 101, 102, 900
    pending = (
        gpu_jobs(VISION, 1, owner=alice, name="alice")
        + gpu_jobs(VISION, 1, owner=bob, name="bob")
        + gpu_jobs(FRAUD, 1, owner=agent, name="agent")
    )
    decisions = decide(snapshot([fabric(POOL, 8)], pending, held={(VISION, alice): SPENT, (0, agent): SPENT}))
    assert [a.job_id for a in decisions.admit] == ["bob-0"]
    assert sorted((w.job_id, w.reason.code) for w in decisions.waiting) == [
        ("agent-0", r.BUDGET_SPENT),
        ("alice-0", r.BUDGET_SPENT),
    ]


def test_released_when_the_hold_is_gone():
    pending = gpu_jobs(VISION, 2)
    assert not decide(snapshot([fabric(POOL, 8)], pending, held={(VISION, 0): SPENT})).admit
    assert len(decide(snapshot([fabric(POOL, 8)], pending)).admit) == 2
