"""What a scoped API token may do: its actions, its queues and its spending cap, and the answer when it may not.

A token without scopes has its user's full power (as every token had before scopes). A scoped token is checked
at every API request against the endpoint's action (`ENDPOINT_ACTIONS`, an allowlist: a write endpoint not named
there is refused to every scoped token, so a new endpoint is safe by default), and by the views against the
queue of the work it touches. Its user's own rights apply as ever: a scope only ever takes power away.

The scopes are columns of the token's own row (ApiToken.scope_actions, scope_queues, cap_gpu_hours, cap_money), so
the one statement that looks a token up reads them too: checking them costs no query. The caps are the exception:
they are counted at a submit, a few queries more (portal.workloads.services.token_cap), for capped tokens only.

A token limited to some queues may not read what spans every queue of a team (TEAM_WIDE: a team's usage, which is
not split by queue, with its budgets): it is refused, naming ALL_QUEUES, rather than shown other queues' figures.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from django.conf import settings
from rest_framework.exceptions import PermissionDenied

# Every action a token may be limited to, in the order of their bits in ApiToken.scope_actions.
READ, SUBMIT, CANCEL, MANAGE = "read", "submit", "cancel", "manage"
ACTIONS = (READ, SUBMIT, CANCEL, MANAGE)
ACTION_HELP = {
    READ: "see queues, workloads, logs and usage",
    SUBMIT: "submit work (single and bulk)",
    CANCEL: "cancel work",
    MANAGE: "change work's priority and extend a lease",
}
_BITS = {action: 1 << i for i, action in enumerate(ACTIONS)}
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
FULL = "full"  # the missing scope an endpoint no scoped token may use names: a token without scopes
CAP = "cap_gpu_hours"  # the missing scope of a submit over the token's cap in GPU-hours
CAP_MONEY = "cap_money"  # the missing scope of a submit over the token's cap in money
ALL_QUEUES = "all_queues"  # the missing scope of a team-wide read by a token limited to some queues

# Reads whose answer spans every queue of a team, by URL name: refused to a token limited to some queues.
TEAM_WIDE = frozenset({"api:group-usage"})

# The action of every API request that writes, by its endpoint's URL name and its method; None: no scoped token
# may send it (minting or revoking tokens, a fabric agent's calls, IT's policy API). Every safe request (GET, HEAD,
# OPTIONS) is "read". A write missing here is refused to scoped tokens (tests/api/test_token_scopes.py holds every
# route of the API to this table).
ENDPOINT_ACTIONS: dict[tuple[str, str], str | None] = {
    ("api:workload-list", "POST"): SUBMIT,
    ("api:workload-bulk", "POST"): SUBMIT,
    ("api:workload-dry-run", "POST"): READ,  # answers without recording anything
    ("api:workload-bulk-dry-run", "POST"): READ,
    ("api:workload-detail", "PATCH"): MANAGE,  # priority, lease
    ("api:workload-cancel", "POST"): CANCEL,
    ("api:workload-extend", "POST"): MANAGE,
    ("api:code-bundle", "PUT"): SUBMIT,  # a team's code bundle, uploaded for the work that names it
    ("api:group-budgets", "POST"): None,  # setting budgets is a lead's or IT's own act, not an agent's
    ("api:token-list", "POST"): None,  # a token never mints another
    ("api:token-revoke", "POST"): None,
    ("api:agent-register", "POST"): None,
    ("api:agent-heartbeat", "POST"): None,
    ("api:agent-claim", "POST"): None,
    ("api:agent-ends", "POST"): None,
    ("api:agent-status", "POST"): None,
    ("api:agent-log", "POST"): None,
    ("api:agent-usage", "POST"): None,
    ("api:agent-pbs-jobs-usage", "POST"): None,
    ("api:agent-lease-key", "PUT"): None,
    ("policy-plan", "POST"): None,
    ("policy-apply", "POST"): None,
    ("policy-kind", "POST"): None,
    ("policy-object", "PUT"): None,
    ("policy-object", "PATCH"): None,
    ("policy-object", "DELETE"): None,
}


def pack(actions: Iterable[str]) -> int:
    """The bits of these actions (each one of ACTIONS)."""
    return sum(_BITS[action] for action in set(actions))


def unpack(bits: int | None) -> tuple[str, ...]:
    """The actions of these bits, in the order of ACTIONS; every action for None (no action scope)."""
    if bits is None:
        return ACTIONS
    return tuple(action for action in ACTIONS if bits & _BITS[action])


def may(token: Any, action: str) -> bool:
    """Whether the token (an ApiToken, or None for a session) may take this action at all."""
    bits = getattr(token, "scope_actions", None)
    return bits is None or bool(bits & _BITS[action])


def queues_of(token: Any) -> list[str] | None:
    """The slugs of the only queues the token may use, or None when it is not limited to some."""
    return getattr(token, "scope_queues", None) or None


def fields_for(
    actions: Sequence[str] | None, queues: Sequence[str] | None, cap: Any, cap_money: Any = None
) -> dict[str, Any]:
    """The ApiToken fields of these scopes (ApiToken.issue's `scopes`): None or empty for each one not set."""
    return {
        "scope_actions": None if actions is None else pack(actions),
        "scope_queues": sorted(set(queues)) if queues else None,
        "cap_gpu_hours": cap,
        "cap_money": cap_money,
    }


def describe(token: Any) -> str:
    """The token's scopes in words, as pages and lists show them: "full access" when it has none."""
    if not token.scoped:
        return "full access"
    parts = []
    if token.scope_actions is not None:
        actions = unpack(token.scope_actions)
        parts.append("read-only" if actions == (READ,) else ", ".join(actions) or "no actions")
    if token.scope_queues:
        parts.append("queues " + ", ".join(token.scope_queues))
    if token.cap_gpu_hours is not None:
        parts.append(f"cap {token.cap_gpu_hours.normalize():f} GPU-hours")
    if getattr(token, "cap_money", None) is not None:
        currency = f" {settings.GRIDLANE_CURRENCY}" if settings.GRIDLANE_CURRENCY else ""
        parts.append(f"money cap {token.cap_money:,.2f}{currency}")
    return "; ".join(parts)


def as_data(token: Any) -> dict[str, Any]:
    """The token's scopes as the API lists them."""
    return {
        "actions": list(unpack(token.scope_actions)),
        "read_only": unpack(token.scope_actions) == (READ,),
        "queues": list(token.scope_queues or []),
        "cap_gpu_hours": token.cap_gpu_hours,
        "cap_money": token.cap_money,
        "currency": settings.GRIDLANE_CURRENCY,
        "scoped": token.scoped,
    }


class ScopeRefused(PermissionDenied):
    """403: the token lacks a scope. The answer names it: {"errors": {"detail": [...], "missing_scope": [...]}},
    and "queue" when it is a queue the token may not use."""

    def __init__(self, message: str, missing: str, queue: str | None = None) -> None:
        detail = {"detail": message, "missing_scope": missing}
        if queue is not None:
            detail["queue"] = queue
        super().__init__(detail)


def action_of(view_name: str | None, method: str) -> str | None:
    """The action a request of this method to this endpoint takes; None when no scoped token may send it."""
    method = method.upper()
    if method in SAFE_METHODS:
        return READ
    return ENDPOINT_ACTIONS.get((view_name or "", method))


def check_endpoint(token: Any, view_name: str | None, method: str) -> None:
    """ScopeRefused unless this scoped token may send this request (a token without scopes always may)."""
    if not token.scoped:
        return
    action = action_of(view_name, method)
    if action is None:
        raise ScopeRefused("This token may not use this endpoint: only a token without scopes may.", FULL)
    if not may(token, action):
        raise ScopeRefused(f"This token may not {action}.", action)
    if token.scope_queues and view_name in TEAM_WIDE:
        raise ScopeRefused(
            "This token is limited to some queues, and this answer covers all of a team's queues: "
            "use a token not limited to queues.",
            ALL_QUEUES,
        )


def check_queue(token: Any, queue: str, action: str) -> None:
    """ScopeRefused when the token is limited to some queues and this is not one of them."""
    allowed = queues_of(token)
    if allowed is not None and queue not in allowed:
        verb = {SUBMIT: "submit to", READ: "read work in"}.get(action, f"{action} work in")
        raise ScopeRefused(f"This token may not {verb} the queue {queue!r}.", "queue", queue)


def check_queues(token: Any, queues: Iterable[str], action: str) -> None:
    """check_queue for each queue, the first refused in sorted order answered."""
    allowed = queues_of(token)
    if allowed is None:
        return
    for queue in sorted(set(queues)):
        check_queue(token, queue, action)
