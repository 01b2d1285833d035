"""Why Kueue has not admitted a Job yet, in words for its owner, from its Workload's status as Kueue 0.19+ writes it.

    conditions[type=QuotaReserved]  False, reason Pending: the flavor assigner's message ("couldn't assign
                                    flavors to pod set main: insufficient unused quota for nvidia.com/gpu in
                                    flavor h100, 1 more needed"); reason Inadmissible: it never can as things are
                                    ("LocalQueue gl-vision doesn't exist", a stopped ClusterQueue)
    conditions[type=Admitted]       False after QuotaReserved True: admission checks still to pass, each in
                                    status.admissionChecks[] with state Pending, Retry or Rejected
    conditions[type=Evicted]        True: taken back (reason Preempted, InactiveWorkload, PodsReadyTimeout, ...)
    status.requeueState.requeueAt   when an evicted Workload is queued again (backoff)
Pure; returns "" when the Workload says nothing of use (the caller then words a general reason).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

Obj = Mapping[str, Any]


def pending_reason(workload: Obj | None, queue: str) -> str:
    """The reason for a suspended Job of LocalQueue `queue`; "" when the Workload gives none."""
    status = (workload or {}).get("status") or {}
    conditions = {c.get("type"): c for c in status.get("conditions") or [] if isinstance(c, dict)}
    evicted = _true(conditions.get("Evicted"))
    reserved = conditions.get("QuotaReserved") or {}
    words = ""
    if reserved.get("status") == "False" and reserved.get("reason") == "Inadmissible":
        words = f"Kueue cannot admit it from LocalQueue {queue}: {reserved.get('message', '')}".rstrip(": ")
    elif reserved.get("status") == "False" and reserved.get("message"):
        words = f"waiting for Kueue to admit it from LocalQueue {queue}: {reserved['message']}"
    elif reserved.get("status") == "True" and not _true(conditions.get("Admitted")):
        checks = [
            f"{c.get('name')} ({c.get('state')}{': ' + c['message'] if c.get('message') else ''})"
            for c in status.get("admissionChecks") or []
            if isinstance(c, dict) and c.get("state") != "Ready"
        ]
        words = f"quota reserved in Kueue; waiting for admission checks: {', '.join(checks) or 'none named yet'}"
    if evicted:
        taken = f"taken back by Kueue ({evicted.get('reason', '')}: {evicted.get('message', '')})"
        words = f"{taken}; {words}" if words else taken
    again = (status.get("requeueState") or {}).get("requeueAt")
    if again and words:
        words += f"; queued again at {again}"
    return words


def _true(condition: Obj | None) -> Obj | None:
    return condition if condition and condition.get("status") == "True" else None
