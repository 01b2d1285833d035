"""Why a workload still waits, or was preempted: named reasons whose messages reach the UI and API verbatim.

Each message says what blocks the work in the user's terms, with the numbers where there are any."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

GROUP_AT_LIMIT = "group_at_limit"
OWNER_AT_LIMIT = "owner_at_limit"
NO_CAPACITY = "no_capacity"
HELD_FOR_RESERVATIONS = "held_for_reservations"
GANG_DOES_NOT_FIT = "gang_does_not_fit"
TOO_BIG = "too_big"
BEHIND_HIGHER_PRIORITY = "behind_higher_priority"
FABRIC_UNAVAILABLE = "fabric_unavailable"
NO_TARGET = "no_target"
PREEMPTED = "preempted"

Amount = tuple[int, int, int]


@dataclass(frozen=True)
class Reason:
    code: str
    message: str


def _n(milli: int) -> str:
    return f"{milli / 1000:g}"


def _describe(a: Amount) -> str:
    return f"{_n(a[0])} GPUs, {_n(a[1])} CPUs, {a[2] / 1024:g} GB"


def _over(used: Amount, limit: Amount, need: Amount) -> str:
    """The first resource over the limit: "4 GPUs of its limit of 4 in use, this needs 2 more"."""
    for i, unit in enumerate(("GPUs", "CPUs", "GB")):
        if used[i] + need[i] > limit[i]:
            scale = 1024 if unit == "GB" else 1000
            return (
                f"{used[i] / scale:g} {unit} of its limit of {limit[i] / scale:g} in use, "
                f"this needs {need[i] / scale:g} more"
            )
    return "at its limit"


def group_at_limit(fabric: str, used: Amount, limit: Amount, need: Amount) -> Reason:
    where = f"on {fabric}" if fabric else "across all fabrics"
    return Reason(GROUP_AT_LIMIT, f"Your team is at its limit {where}: {_over(used, limit, need)}.")


def owner_at_limit(used_milli: int, limit_milli: int, need_milli: int) -> Reason:
    return Reason(
        OWNER_AT_LIMIT,
        f"This identity is at its own limit: {_n(used_milli)} of {_n(limit_milli)} GPUs in use, "
        f"this needs {_n(need_milli)} more.",
    )


def no_capacity(fabric: str, free: Amount, need: Amount) -> Reason:
    return Reason(
        NO_CAPACITY, f"Waiting for capacity on {fabric}: needs {_describe(need)}; free now {_describe(free)}."
    )


def held_for_reservations(fabric: str, held: Amount) -> Reason:
    return Reason(
        HELD_FOR_RESERVATIONS,
        f"The free capacity on {fabric} is held for other teams' reservations ({_n(held[0])} GPUs) "
        "while they have work waiting.",
    )


def gang_does_not_fit(fabric: str, nodes: int, free: Amount, need: Amount) -> Reason:
    return Reason(
        GANG_DOES_NOT_FIT,
        f"All {nodes} nodes must start together; {fabric} has {_describe(free)} free, "
        f"the gang needs {_describe(need)}.",
    )


def too_big(fabric: str, capacity: Amount, need: Amount) -> Reason:
    return Reason(
        TOO_BIG, f"{fabric} can never hold this: it has {_describe(capacity)} in all, this needs {_describe(need)}."
    )


def behind_higher_priority(fabric: str, head_start: datetime) -> Reason:
    return Reason(
        BEHIND_HIGHER_PRIORITY,
        f"Behind higher-priority work on {fabric}, which is due to start by {head_start:%Y-%m-%d %H:%M} UTC; "
        "this would still be running then.",
    )


def fabric_unavailable(fabric: str) -> Reason:
    return Reason(FABRIC_UNAVAILABLE, f"The fabric {fabric} is unavailable; the work waits until it is back.")


def no_target(queue: str) -> Reason:
    return Reason(NO_TARGET, f"The queue {queue} has no fabric behind it; ask IT.")


def preempted(fabric: str) -> Reason:
    return Reason(
        PREEMPTED, f"Preempted on {fabric} to give another team its reserved capacity back; it will run again."
    )
