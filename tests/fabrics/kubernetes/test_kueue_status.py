"""The pending reason a person reads comes from the Workload's conditions as Kueue 0.19 writes them."""

from __future__ import annotations

from typing import Any

import pytest

from fabrics.kubernetes.kueue_status import pending_reason

QUOTA = (
    "couldn't assign flavors to pod set main: insufficient unused quota for nvidia.com/gpu in flavor h100, "
    "1 more needed"
)


def workload(*conditions: tuple[str, str, str, str], **status: Any) -> dict[str, Any]:
    rows = [{"type": t, "status": s, "reason": r, "message": m} for t, s, r, m in conditions]
    return {"status": {"conditions": rows} | status}


@pytest.mark.parametrize(
    ("name", "given", "want"),
    [
        (
            "waiting for quota: the flavor assigner's words",
            workload(("QuotaReserved", "False", "Pending", QUOTA)),
            f"waiting for Kueue to admit it from LocalQueue gl-vision: {QUOTA}",
        ),
        (
            "no LocalQueue of that name: inadmissible",
            workload(("QuotaReserved", "False", "Inadmissible", "LocalQueue gl-vision doesn't exist")),
            "Kueue cannot admit it from LocalQueue gl-vision: LocalQueue gl-vision doesn't exist",
        ),
        (
            "quota reserved, an admission check pending",
            workload(
                ("QuotaReserved", "True", "QuotaReserved", "Quota reserved in ClusterQueue k8s-vision"),
                ("Admitted", "False", "NoChecks", ""),
                admissionChecks=[{"name": "provisioning", "state": "Pending", "message": "waiting for nodes"}],
            ),
            "quota reserved in Kueue; waiting for admission checks: provisioning (Pending: waiting for nodes)",
        ),
        (
            "preempted and queued again later",
            workload(
                ("Evicted", "True", "Preempted", "Preempted to accommodate a higher priority Workload"),
                ("QuotaReserved", "False", "Pending", QUOTA),
                requeueState={"count": 1, "requeueAt": "2026-12-06T03:00:00Z"},
            ),
            "taken back by Kueue (Preempted: Preempted to accommodate a higher priority Workload); waiting for "
            f"Kueue to admit it from LocalQueue gl-vision: {QUOTA}; queued again at 2026-12-06T03:00:00Z",
        ),
        ("nothing written yet", {"status": {}}, ""),
        ("no workload found", None, ""),
    ],
)
def test_pending_reasons(name: str, given: dict[str, Any] | None, want: str) -> None:
    assert pending_reason(given, "gl-vision") == want
