"""What the workload services raise: each refusal says which field is wrong, or why the change cannot be made."""

from __future__ import annotations

from django.conf import settings
from django.core.exceptions import PermissionDenied


class SubmitRejected(Exception):
    """The request is not valid; `errors` maps each field to what is wrong with it."""

    def __init__(self, errors: dict[str, list[str]]) -> None:
        super().__init__(errors)
        self.errors = errors


class QueueForbidden(PermissionDenied):
    """The user may not submit to the queue (as any of their teams)."""


class IdempotencyConflict(Exception):
    """The Idempotency-Key was used before for a different request."""


class Unconfirmed(Exception):
    """A submit on a token taken unconfirmed from what a web process keeps could not be recorded by the one
    statement that confirms the token (see submit): nothing was written or counted. Confirm the token, then
    submit again."""


class InvalidTransition(Exception):
    """The move between two states is not a workload transition (portal.workloads.states)."""


class BulkRejected(Exception):
    """Some items of a bulk submit are not valid: `errors` maps each bad item's index to its field errors.
    Nothing was recorded. `status` is 403 when the only problem is queues the user may not use."""

    def __init__(self, errors: dict[int, dict[str, list[str]]], status: int = 400) -> None:
        super().__init__(errors)
        self.errors = errors
        self.status = status


class CannotExtend(Exception):
    """The lease cannot be extended now, or not where it runs; the message says why, in plain words."""


class TokenCapSpent(Exception):
    """The work asked for would take the API token it is submitted with past one of its own spending caps
    (ApiToken.cap_gpu_hours, or cap_money: `scope` names it): nothing was recorded."""

    def __init__(self, cap: float, spent: float, asked: float, scope: str = "cap_gpu_hours") -> None:
        if scope == "cap_money":
            currency = f" {settings.GRIDLANE_CURRENCY}" if settings.GRIDLANE_CURRENCY else ""
            message = (
                f"This token's cap of {cap:,.2f}{currency} would be passed: {spent:,.2f} spent or committed, "
                f"{asked:,.2f} asked for (work not yet ended counts all of its runtime limit at the highest price "
                "among its queue's targets)."
            )
        else:
            message = (
                f"This token's cap of {cap:g} GPU-hours would be passed: {spent:.2f} spent or committed, "
                f"{asked:.2f} asked for."
            )
        super().__init__(message)
        self.cap, self.spent, self.asked, self.scope = cap, spent, asked, scope
