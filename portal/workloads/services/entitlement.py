"""What a submission to one queue reads before it is checked (its `SubmitContext`): the queue with its targets
and their fabrics, the teams the user may submit to it as (with their caps and tiers), and which of those the user
leads. Two statements, or none while this process keeps a context read under the current generation
(portal.workloads.context)."""

from __future__ import annotations

from dataclasses import dataclass
from dataclasses import field as dataclass_field
from typing import Any

from django.db import connection
from django.utils import timezone

from portal import access, sql
from portal.queues import tiers
from portal.queues.models import Queue, QueueTarget
from portal.workloads import context, limits
from portal.workloads.services.errors import QueueForbidden, SubmitRejected


@dataclass(frozen=True)
class SubmitContext:
    """What a submission to one queue reads from the database, once: the queue with its targets and their
    fabrics, the teams the user may submit to it as, and which of those the user leads. Submit checks are plain
    functions over this and the request, so a submit stays within its statement budget."""

    queue: Queue
    groups: list[Any]
    leads: frozenset[int]
    # never_runs's answer by team and shape of request (see checks.check_fits_somewhere), worked out once while
    # the context is kept: it reads only the queue's fabrics and the team's caps, which came with the context.
    fits: dict[tuple[Any, ...], dict[str, list[str]]] = dataclass_field(default_factory=dict, compare=False, repr=False)


def submit_context(user: Any, slug: str, generation: int | None = None) -> SubmitContext:
    """The queue (targets and fabrics in the same query) and the user's entitlement to it (one more).

    Raises SubmitRejected when there is no such enabled queue, QueueForbidden when the user may not use it.
    With the `generation` of what a context is read from (ratelimit.check_submit read it), a context this
    process read for the same caller and queue under the same generation a moment ago is used instead, with no
    statement at all (portal.workloads.context).
    """
    if generation is None:
        return read_context(user, slug)
    key = context_key(user, slug)
    now = timezone.now()  # before the read: what is kept is at least this new
    found = context.kept(key, generation, now)
    if found is None:
        found = read_context(user, slug)
        context.keep(key, generation, found, now)
    return found  # type: ignore[no-any-return]


def context_key(user: Any, slug: str) -> tuple[Any, ...]:
    """What a kept context is kept under: the database, the queue, and the caller as what it may see depends on."""
    service = access.service_of(user)
    return (connection.alias, slug, user.pk, access.is_it(user), service.pk if service is not None else None)


def read_context(user: Any, slug: str) -> SubmitContext:
    """Read a queue's context for this user (two statements); see submit_context for what it raises."""
    # fabric__posix_policy: the run-as check reads each fabric's POSIX policy, in the same statement.
    targets = _TARGETS.run(
        "targets",
        lambda s: QueueTarget.objects.filter(queue__slug=s, queue__enabled=True).select_related(
            "queue", "fabric", "fabric__posix_policy"
        ),
        slug,
    )
    queue = targets[0].queue if targets else Queue.objects.filter(slug=slug, enabled=True).first()
    if queue is None:
        raise SubmitRejected({"queue": [f"There is no queue called {slug!r}."]})
    for target in targets:
        target.queue = queue
    sql.prefetched(queue, "targets", targets)
    # Each team's caps on the queue's fabrics, and the priority tiers it may use, come in the same statement.
    fabric_ids = [t.fabric_id for t in targets]
    groups, leads = access.submit_entitlement(
        user,
        queue,
        lambda ref, now: limits.cap_columns(fabric_ids, ref, now) | tiers.columns(ref),
        shape=("caps and tiers", *fabric_ids),
    )
    if not groups and not access.is_it(user):
        raise QueueForbidden(f"You may not use the queue {queue.name}.")
    return SubmitContext(queue, groups, leads)


# A queue's targets, read on every submit: built and compiled once (sql.Compiled), then only sent.
_TARGETS = sql.Compiled(QueueTarget)
