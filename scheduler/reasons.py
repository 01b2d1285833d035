"""Why a workload still waits: named reasons whose messages reach the UI and API verbatim."""

from __future__ import annotations

from dataclasses import dataclass

from fabrics.base import Resources

GROUP_AT_LIMIT = "group_at_limit"
NO_CAPACITY = "no_capacity"
FABRIC_UNAVAILABLE = "fabric_unavailable"
NO_TARGET = "no_target"


@dataclass(frozen=True)
class Reason:
    code: str
    message: str


def _gpus(milli: int) -> str:
    return f"{milli / 1000:g} GPU" + ("" if milli == 1000 else "s")


def _describe(amount: Resources) -> str:
    return f"{_gpus(amount.gpus_milli)}, {amount.cpus_milli / 1000:g} CPUs, {amount.memory_mib / 1024:g} GB"


def group_at_limit(fabric: str, used: Resources, limit: Resources, need: Resources) -> Reason:
    """Names the first resource over the limit: "4 GPUs of its limit of 4 in use, this needs 2 more"."""
    if used.gpus_milli + need.gpus_milli > limit.gpus_milli:
        have, cap, more = _gpus(used.gpus_milli), f"{limit.gpus_milli / 1000:g}", need.gpus_milli / 1000
    elif used.cpus_milli + need.cpus_milli > limit.cpus_milli:
        have, cap, more = f"{used.cpus_milli / 1000:g}", f"{limit.cpus_milli / 1000:g} CPUs", need.cpus_milli / 1000
    else:
        have, cap, more = f"{used.memory_mib / 1024:g}", f"{limit.memory_mib / 1024:g} GB", need.memory_mib / 1024
    what = f"{have} of its limit of {cap} in use, this needs {more:g} more"
    return Reason(GROUP_AT_LIMIT, f"Your team is at its limit on {fabric}: {what}.")


def no_capacity(fabric: str, free: Resources, need: Resources) -> Reason:
    return Reason(
        NO_CAPACITY, f"Waiting for capacity on {fabric}: needs {_describe(need)}; free now {_describe(free)}."
    )


def fabric_unavailable(fabric: str) -> Reason:
    return Reason(FABRIC_UNAVAILABLE, f"The fabric {fabric} is unavailable; the work waits until it is back.")


def no_target(queue: str) -> Reason:
    return Reason(NO_TARGET, f"The queue {queue} has no fabric behind it; IT has been told.")
