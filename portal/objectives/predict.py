"""A what-if's predicted effect on a wait objective (portal.whatif replays; this picks the objective's work and
reads its waits). Pure once the objective is loaded."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from portal.objectives.models import WaitObjective
from scheduler.model import Job
from scheduler.replay import percentile


def selector(objective: WaitObjective) -> Callable[[Job], bool]:
    """Whether a replayed job is the objective's work (its queue, tier or team)."""
    if objective.kind == WaitObjective.Kind.QUEUE:
        queue_id = objective.queue_id
        return lambda job: job.queue_id == queue_id
    if objective.kind == WaitObjective.Kind.TIER:
        slug = objective.tier.slug if objective.tier else ""
        return lambda job: job.priority == slug
    team_id = objective.team_id
    return lambda job: job.group_id == team_id


def figures(objective: WaitObjective, waits: Sequence[float]) -> dict[str, Any]:
    """The objective's figures over replayed (or actual) waits: how many, the percentile wait, the share that
    waited longer than the threshold and the error budget that leaves (None where nothing waited)."""
    if not waits:
        return {"workloads": 0, "wait_s": None, "over_share": None, "budget_remaining": None}
    over = sum(1 for w in waits if w > objective.threshold_minutes * 60) / len(waits)
    return {
        "workloads": len(waits),
        "wait_s": round(percentile(waits, objective.percent), 1),
        "over_share": round(over, 4),
        "budget_remaining": round(1 - over / objective.budget, 4) if objective.budget else None,
    }
