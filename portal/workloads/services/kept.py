"""The API's one-statement submit: the fast path beside the plain one (services.submit.submit), which it mirrors.

A submit with a rate-limit charge whose caller and queue have a context this process kept a moment ago
(portal.workloads.context) goes as `KeptSubmit`: the value carries its guard, the generation the context was
read under. The statement that records the workload (store.insert_submitted_guarded) also counts the charge,
and does both only while the database's generation is still the guard's; otherwise nothing was written or
counted and the submit goes the plain way (`WholeWay`). A submit that goes this way sends one statement where
the plain way sends three to five.

Guarded by `bench.profile_submit` (statements and time of one API submit) and tests/api/test_submit_context.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from django.db import connection

from portal.workloads import context
from portal.workloads.services.checks import check_submit
from portal.workloads.services.entitlement import SubmitContext, context_key
from portal.workloads.services.errors import QueueForbidden, SubmitRejected, Unconfirmed
from portal.workloads.services.recording import insert, keyed, replay, replayed
from portal.workloads.services.request import SubmitRequest

if TYPE_CHECKING:
    from portal.accounts.ratelimit import Charge
    from portal.workloads.models import Workload


@dataclass(frozen=True)
class WholeWay:
    """The kept context could not be used: the submit was counted now, under this generation, and goes the
    plain way with it."""

    generation: int | None


@dataclass(frozen=True)
class KeptSubmit:
    """A submit that may go in one statement: the context kept for its caller and queue, the generation it was
    read under (the guard), the charge the statement counts, and whether the caller's token is unconfirmed
    (then nothing may be written or answered unless that statement goes through)."""

    generation: int
    context: SubmitContext
    charge: Charge
    unconfirmed: bool

    @classmethod
    def find(cls, user: Any, req: SubmitRequest, charge: Charge, unconfirmed: int | None) -> KeptSubmit | None:
        """The kept way for this submit, or None (SQLite, an array, no context kept, or a token kept under
        another generation)."""
        if connection.vendor != "postgresql" or req.array:
            return None
        found = context.latest(context_key(user, req.queue))
        if found is None or unconfirmed not in (None, found[0]):
            return None
        return cls(found[0], found[1], charge, unconfirmed is not None)

    def submit(
        self, user: Any, req: SubmitRequest, idempotency_key: str | None, token: Any = None
    ) -> tuple[Workload, bool] | WholeWay:
        """Check against the kept context and record in one statement; WholeWay when the guard no longer holds.

        A refusal by the kept context is counted on its own (every submission counts, refused or not), and is
        answered only if the generation has not moved meanwhile. With an unconfirmed token both raise
        Unconfirmed instead, with nothing written: a refusal would be counted, and answered, for a token that
        may no longer be used."""
        try:
            workload = check_submit(user, req, self.context)
        except (SubmitRejected, QueueForbidden):
            if self.unconfirmed:
                raise Unconfirmed from None
            now = self.charge.count()
            if now != self.generation:  # what refused it may have changed since: read it again
                return WholeWay(now)
            existing = replay(user, req, idempotency_key) if idempotency_key else None
            if existing is None:
                raise
            return existing, False
        keyed(workload, req, idempotency_key)
        if token is not None:  # the API token it is sent with (never a capped one: services.submit)
            workload.token_id = token.pk
        inserted = insert(workload, self)
        if inserted is None:  # the generation moved: counted now, with the context read under the new one
            if self.unconfirmed:
                raise Unconfirmed
            return WholeWay(self.charge.count())
        if inserted:
            return workload, True
        return replayed(user, req, idempotency_key, workload), False
