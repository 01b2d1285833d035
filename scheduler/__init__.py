"""Gridlane's policy engine: pure Python, no Django, no clock, no I/O.

`decide(snapshot) -> Decisions` is the whole interface; the worker builds the snapshot and applies
the decisions.
"""

from scheduler.decide import decide
from scheduler.model import Admit, Decisions, FabricState, Job, Preempt, QueueState, Quota, Snapshot, Waiting, Weights

__all__ = [
    "Admit",
    "Decisions",
    "FabricState",
    "Job",
    "Preempt",
    "QueueState",
    "Quota",
    "Snapshot",
    "Waiting",
    "Weights",
    "decide",
]
