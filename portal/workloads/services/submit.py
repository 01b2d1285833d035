"""A single submit, from the request to the row: the context (entitlement), the checks (checks), the record
(recording), or the one-statement way while a context is kept (kept.KeptSubmit)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.db import IntegrityError

from portal.workloads.services import token_cap
from portal.workloads.services.bulk import do_submit_many
from portal.workloads.services.checks import check_submit
from portal.workloads.services.errors import QueueForbidden, SubmitRejected, Unconfirmed
from portal.workloads.services.kept import KeptSubmit, WholeWay
from portal.workloads.services.recording import insert, keyed, replay, replayed
from portal.workloads.services.request import SubmitRequest

if TYPE_CHECKING:
    from portal.accounts.ratelimit import Charge
    from portal.workloads.models import Workload


def submit(
    user: Any,
    req: SubmitRequest,
    idempotency_key: str | None = None,
    generation: int | None = None,
    charge: Charge | None = None,
    unconfirmed: int | None = None,
    token: Any = None,
) -> tuple[Workload, bool]:
    """Check and record a submission. Returns the workload and whether it was created now.

    With an idempotency key, a repeat of the same request returns the first one; the same key with a different
    request raises IdempotencyConflict.

    On PostgreSQL this costs three statements: the queue with its targets and fabrics, the user's teams
    for it, and one that inserts the workload with its first event and sends the kick (a repeated key:
    one more, reading the first workload). With the `generation` ratelimit.check_submit returned, the first
    two are left out while a context read under it is kept (portal.workloads.context). The returned
    workload carries its queue, team, owner and event.

    With a rate-limit `charge` (ratelimit.Charge) instead, the submit is counted against its identity's limit
    here, and RateLimited raised when it is over: in the statement that records it, while this process keeps a
    context for the caller and queue (one statement in all: kept.KeptSubmit); else first, on its own, as
    ratelimit.check_submit counts.

    With `unconfirmed`, the generation the caller's token was kept under (portal.api.auth), the token is confirmed
    by that statement, which is then sent only with a context kept under the same generation; Unconfirmed is
    raised, before anything is written or counted, when the submit cannot go that way.

    With the API `token` it is sent with, the workload records it; a token with a spending cap of its own has the
    work counted against it first, in a transaction that holds the token's row until the work is recorded
    (token_cap.guarded: a few queries more, so such a submit never goes the one-statement way), TokenCapSpent
    raised when it would pass a cap.
    """
    if charge is not None:
        kept = None if token_cap.capped(token) else KeptSubmit.find(user, req, charge, unconfirmed)
        if kept is not None:
            done = kept.submit(user, req, idempotency_key, token)
            if not isinstance(done, WholeWay):
                return done
            return submit(user, req, idempotency_key, generation=done.generation, token=token)
        if unconfirmed is not None:
            raise Unconfirmed
        generation = charge.count()
    try:
        workload = check_submit(user, req, generation=generation)
    except (SubmitRejected, QueueForbidden):
        # A repeat of a request accepted once is answered with its workload, even if it would be refused
        # now (its queue disabled since, say).
        existing = replay(user, req, idempotency_key) if idempotency_key else None
        if existing is None:
            raise
        return existing, False
    keyed(workload, req, idempotency_key)
    token_cap.stamp([workload], token)
    if not token_cap.capped(token):
        return _record(user, req, idempotency_key, workload)
    with token_cap.guarded(token):  # one capped submit of this token at a time, counted and recorded
        existing = replay(user, req, idempotency_key) if idempotency_key else None
        if existing is not None:  # a repeat is answered with the first one, never counted again
            return existing, False
        token_cap.check(token, [workload])
        return _record(user, req, idempotency_key, workload)


def _record(user: Any, req: SubmitRequest, idempotency_key: str | None, workload: Workload) -> tuple[Workload, bool]:
    """Record a checked workload (an array as its parent and elements); a repeated key answers the first one."""
    if workload.array_size:
        try:  # an array is recorded as a bulk submit: the parent and its elements
            do_submit_many([(workload, None)], answered_whole=True)
            return workload, True
        except IntegrityError:
            if not idempotency_key:
                raise
    elif insert(workload):
        return workload, True
    return replayed(user, req, idempotency_key, workload), False
