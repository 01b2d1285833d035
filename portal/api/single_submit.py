"""The API's single submit (POST /api/v1/workloads/), as WorkloadViewSet.create runs it: parse, submit, answer.

Its rules:
- Every submission counts once against the caller's rate limit, refused or not: by the submit itself
  (services.submit, with the charge), or here when the body does not parse.
- A token kept unconfirmed (auth.kept) is confirmed before anything is counted or answered: by the submit's own
  statement (the kept way, services.kept.KeptSubmit), else by looking it up again (here, or in the view's
  handle_exception). When the kept way finds it cannot vouch for the token (services.Unconfirmed), the token is
  looked up again and the submit goes the plain way.
- A refusal names its field: the body's fields (WorkloadIn.parse, the services' checks), `Idempotency-Key`, or
  `detail` for the rate limit (429, with Retry-After).

The fast path (kept token and context, rate limit and insert in one statement) lives in the services
(services.kept); this module only hands it the request's token state and charge.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from rest_framework.exceptions import ParseError, PermissionDenied, ValidationError
from rest_framework.request import Request
from rest_framework.response import Response

from portal.accounts import ratelimit, scopes
from portal.api import auth
from portal.api.serializers import WorkloadIn
from portal.workloads import services
from portal.workloads.models import Workload

IDEMPOTENCY_KEY_RE = re.compile(r"[\x21-\x7e]{1,200}")
# What a submit may be refused with, each answered by `refusal`.
REFUSALS = (
    ratelimit.RateLimited,
    services.SubmitRejected,
    services.QueueForbidden,
    services.IdempotencyConflict,
    services.TokenCapSpent,
)


@dataclass(frozen=True)
class Parsed:
    """A single submit's request as it parsed: the workload asked for and its Idempotency-Key."""

    request: services.SubmitRequest
    idempotency_key: str | None


def parse(request: Request) -> Parsed:
    """The submit the request asks for. A bad Idempotency-Key is refused before anything is counted; a body that
    does not parse is counted against the rate limit (once the token is confirmed) and refused."""
    key = request.headers.get("Idempotency-Key")
    if key is not None and not IDEMPOTENCY_KEY_RE.fullmatch(key):
        raise ValidationError({"Idempotency-Key": ["Use 1-200 printable ASCII characters."]})
    try:
        return Parsed(WorkloadIn.parse(request.data), key)
    except (ParseError, ValidationError):
        count_refused(request)
        raise


def submit(request: Request, parsed: Parsed) -> tuple[Workload, bool]:
    """(the workload, whether it is new): recorded, or the earlier one under the same Idempotency-Key.

    A token limited to some queues may submit only to those (scopes.ScopeRefused, 403, once it is confirmed); the
    workload records the token it was sent with, and a token's own cap counts it (services.TokenCapSpent)."""
    try:
        scopes.check_queue(request.auth, parsed.request.queue, scopes.SUBMIT)
    except scopes.ScopeRefused:
        count_refused(request)  # refused or not, a submission counts
        raise
    try:
        return services.submit(
            request.user,
            parsed.request,
            idempotency_key=parsed.idempotency_key,
            charge=ratelimit.Charge.of(request.user),
            unconfirmed=auth.unconfirmed(request),
            token=request.auth,
        )
    except services.Unconfirmed:
        auth.confirm(request)
        return services.submit(
            request.user,
            parsed.request,
            idempotency_key=parsed.idempotency_key,
            charge=ratelimit.Charge.of(request.user),
            token=request.auth,
        )


def refusal(refused: Exception) -> Response:
    """The answer to one of REFUSALS: a response (429, 422), or the DRF error the view answers with (400, 403)."""
    if isinstance(refused, ratelimit.RateLimited):
        headers = {"Retry-After": str(refused.retry_after)}
        return Response({"errors": {"detail": [str(refused)]}}, status=429, headers=headers)
    if isinstance(refused, services.IdempotencyConflict):
        return Response({"errors": {"Idempotency-Key": [str(refused)]}}, status=422)
    if isinstance(refused, services.SubmitRejected):
        raise ValidationError(refused.errors) from refused
    if isinstance(refused, services.QueueForbidden):
        raise PermissionDenied(str(refused)) from refused
    if isinstance(refused, services.TokenCapSpent):
        raise cap_refusal(refused) from refused
    raise refused


def cap_refusal(spent: services.TokenCapSpent) -> scopes.ScopeRefused:
    """The 403 of a submit past its token's own cap, naming the scope."""
    return scopes.ScopeRefused(str(spent), spent.scope)


def count_refused(request: Request) -> None:
    """A submission refused before it reaches the service still counts against the rate limit: once its token is
    confirmed (auth.confirm), so that nothing is counted for a token that may no longer be used."""
    auth.confirm(request)
    ratelimit.Charge.of(request.user).count()
