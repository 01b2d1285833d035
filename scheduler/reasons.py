"""Why a workload still waits, or was preempted: named reasons whose messages reach the UI and API verbatim.

Each message says what blocks the work in the user's terms, with the numbers where there are any. A cycle
may give thousands of reasons and the worker stores few of them, so a message is only written when read.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

GROUP_AT_LIMIT = "group_at_limit"
OWNER_AT_LIMIT = "owner_at_limit"
DEPARTMENT_AT_LIMIT = "department_at_limit"
MEMBER_AT_LIMIT = "member_at_limit"
QUEUE_AT_SHARE = "queue_at_share"
NO_CAPACITY = "no_capacity"
HELD_FOR_RESERVATIONS = "held_for_reservations"
KEPT_FOR_SHORT_WORK = "kept_for_short_work"
GANG_DOES_NOT_FIT = "gang_does_not_fit"
TOO_BIG = "too_big"
BEHIND_HIGHER_PRIORITY = "behind_higher_priority"
FABRIC_UNAVAILABLE = "fabric_unavailable"
NO_TARGET = "no_target"
PREEMPTED = "preempted"
ARRAY_THROTTLE = "array_throttle"
BUDGET_SPENT = "budget_spent"

Amount = tuple[int, int, int]


class Reason:
    """A reason code and its message, the message made on first use."""

    __slots__ = ("_args", "_make", "_message", "code")

    def __init__(self, code: str, message: str | None = None, make: Callable[..., str] | None = None,
                 args: tuple[Any, ...] = ()) -> None:  # fmt: skip
        self.code = code
        self._message = message
        self._make = make
        self._args = args

    @property
    def message(self) -> str:
        if self._message is None:
            self._message = self._make(*self._args) if self._make else self.code
        return self._message

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Reason) and (self.code, self.message) == (other.code, other.message)

    def __hash__(self) -> int:
        return hash((self.code, self.message))

    def __repr__(self) -> str:
        return f"Reason({self.code!r}, {self.message!r})"


def _n(milli: int) -> str:
    return f"{milli / 1000:g}"


def _count(milli: int, noun: str) -> str:
    """ "1 GPU", "0.25 GPU", "2 GPUs", "0 GPUs" (as portal.words counts them)."""
    return f"{_n(milli)} {noun}" + ("" if 0 < milli <= 1000 else "s")


def _describe(a: Amount) -> str:
    return f"{_count(a[0], 'GPU')}, {_count(a[1], 'CPU')}, {a[2] / 1024:g} GB"


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
    return Reason(GROUP_AT_LIMIT, None, _group_at_limit, (fabric, used, limit, need))


def _group_at_limit(fabric: str, used: Amount, limit: Amount, need: Amount) -> str:
    where = f"on {fabric}" if fabric else "across all fabrics"
    return f"Your team is at its limit {where}: {_over(used, limit, need)}."


def member_at_limit(used_milli: int, limit_milli: int, need_milli: int) -> Reason:
    return Reason(MEMBER_AT_LIMIT, None, _member_at_limit, (used_milli, limit_milli, need_milli))


def _member_at_limit(used_milli: int, limit_milli: int, need_milli: int) -> str:
    return (
        f"You are at the limit each member of your team may hold: {_n(used_milli)} of {_n(limit_milli)} GPUs "
        f"in use, this needs {_n(need_milli)} more."
    )


def queue_at_share(queue: str, fabric: str, share: int, used_milli: int, cap_milli: int, need_milli: int) -> Reason:
    return Reason(QUEUE_AT_SHARE, None, _queue_at_share, (queue, fabric, share, used_milli, cap_milli, need_milli))


def _queue_at_share(queue: str, fabric: str, share: int, used_milli: int, cap_milli: int, need_milli: int) -> str:
    return (
        f"The queue {queue} is at its share of {fabric} ({share} % of its GPUs): {_n(used_milli)} of "
        f"{_n(cap_milli)} GPUs in use, this needs {_n(need_milli)} more."
    )


def department_at_limit(fabric: str, used: Amount, limit: Amount, need: Amount) -> Reason:
    return Reason(DEPARTMENT_AT_LIMIT, None, _department_at_limit, (fabric, used, limit, need))


def _department_at_limit(fabric: str, used: Amount, limit: Amount, need: Amount) -> str:
    where = f"on {fabric}" if fabric else "across all fabrics"
    return f"Your department is at its limit {where} (all its teams together): {_over(used, limit, need)}."


def owner_at_limit(used_milli: int, limit_milli: int, need_milli: int) -> Reason:
    return Reason(OWNER_AT_LIMIT, None, _owner_at_limit, (used_milli, limit_milli, need_milli))


def _owner_at_limit(used_milli: int, limit_milli: int, need_milli: int) -> str:
    return (
        f"This identity is at its own limit: {_n(used_milli)} of {_n(limit_milli)} GPUs in use, "
        f"this needs {_n(need_milli)} more."
    )


def no_capacity(fabric: str, free: Amount, need: Amount, lent_milli: int = 0) -> Reason:
    """`lent_milli`: GPUs of the team's unused reservation there that other teams' work holds and cannot be
    preempted to give back (0: none, or the work is not owed to a reservation)."""
    return Reason(NO_CAPACITY, None, _no_capacity, (fabric, free, need, lent_milli))


def _no_capacity(fabric: str, free: Amount, need: Amount, lent_milli: int = 0) -> str:
    # Free is below zero where the fabric reports less than the work already on it holds (nodes went down).
    now = (max(0, free[0]), max(0, free[1]), max(0, free[2]))
    if lent_milli:
        return (
            f"Your team's reservation on {fabric} is lent to other teams' work that cannot be preempted "
            f"({_count(lent_milli, 'GPU')} of it); this starts as that work ends. Needs {_describe(need)}; "
            f"free now {_describe(now)}."
        )
    return f"Waiting for capacity on {fabric}: needs {_describe(need)}; free now {_describe(now)}."


def held_for_reservations(fabric: str, held: Amount) -> Reason:
    return Reason(HELD_FOR_RESERVATIONS, None, _held_for_reservations, (fabric, held))


def kept_for_short_work(fabric: str, kept: int, short_s: int) -> Reason:
    return Reason(KEPT_FOR_SHORT_WORK, None, _kept_for_short_work, (fabric, kept, short_s))


def _kept_for_short_work(fabric: str, kept: int, short_s: int) -> str:
    return (
        f"This long work would take the {_count(kept, 'GPU')} kept free on {fabric} for short work (a runtime limit "
        f"of {short_s / 3600:g} hours or less): it starts once more is free there."
    )


def _held_for_reservations(fabric: str, held: Amount) -> str:
    return (
        f"The free capacity on {fabric} is held for other teams' reservations ({_n(held[0])} GPUs) "
        "while their own work waits for it."
    )


def gang_does_not_fit(fabric: str, nodes: int, free: Amount, need: Amount) -> Reason:
    return Reason(GANG_DOES_NOT_FIT, None, _gang_does_not_fit, (fabric, nodes, free, need))


def _gang_does_not_fit(fabric: str, nodes: int, free: Amount, need: Amount) -> str:
    return (
        f"All {nodes} nodes must start together; {fabric} has {_describe(free)} free, the gang needs {_describe(need)}."
    )


def too_big(fabric: str, capacity: Amount, need: Amount) -> Reason:
    return Reason(TOO_BIG, None, _too_big, (fabric, capacity, need))


def _too_big(fabric: str, capacity: Amount, need: Amount) -> str:
    return f"{fabric} can never hold this: it has {_describe(capacity)} in all, this needs {_describe(need)}."


def behind_higher_priority(fabric: str, head_start: datetime) -> Reason:
    return Reason(BEHIND_HIGHER_PRIORITY, None, _behind_higher_priority, (fabric, head_start))


def _behind_higher_priority(fabric: str, head_start: datetime) -> str:
    return (
        f"Behind higher-priority work on {fabric}, which is due to start by {head_start:%Y-%m-%d %H:%M} UTC; "
        "this would still be running then."
    )


def fabric_unavailable(fabric: str) -> Reason:
    return Reason(FABRIC_UNAVAILABLE, f"The fabric {fabric} is unavailable; the work waits until it is back.")


def no_target(queue: str) -> Reason:
    return Reason(NO_TARGET, f"The queue {queue} has no fabric behind it; ask IT.")


def array_throttle(most: int) -> Reason:
    return Reason(
        ARRAY_THROTTLE, f"Its array runs at most {most} elements at once (its % limit); it starts when one ends."
    )


def budget_spent(message: str) -> Reason:
    """Work held because a budget over it is spent: the words are the portal's (scope, window, figures), since
    the scheduler knows nothing of budgets but which work they hold (held.py)."""
    return Reason(BUDGET_SPENT, message)


def preempted(fabric: str, idle: bool = False, tier: str = "") -> Reason:
    """`tier`: the tier of the work that took its place (tier preemption); empty: a team's reservation came back."""
    if tier:
        return Reason(
            PREEMPTED,
            f"Preempted on {fabric}: its team was borrowing capacity and work of the higher tier {tier} needed it; "
            "it will run again.",
        )
    if idle:
        return Reason(
            PREEMPTED,
            f"Preempted on {fabric}: its GPUs sat idle and another team was owed its reserved capacity; "
            "it will run again.",
        )
    return Reason(
        PREEMPTED, f"Preempted on {fabric} to give another team its reserved capacity back; it will run again."
    )
