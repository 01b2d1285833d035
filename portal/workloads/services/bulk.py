"""Bulk submits and arrays: every item checked before anything is recorded (items of one shape checked once),
then all recorded in one transaction, or none; an array's parent is recorded with a workload per index."""

from __future__ import annotations

import copy
import logging
import uuid
from dataclasses import replace
from typing import Any

from django.db import IntegrityError, connection, transaction
from django.utils import timezone

from fabrics import native as fabric_native
from portal import sql
from portal.workloads import kick, store
from portal.workloads.models import Workload, WorkloadEvent
from portal.workloads.services import token_cap
from portal.workloads.services.checks import check_submit, name_and_command_errors
from portal.workloads.services.entitlement import SubmitContext, submit_context
from portal.workloads.services.errors import BulkRejected, QueueForbidden, SubmitRejected
from portal.workloads.services.recording import first_event, keyed, remember_events
from portal.workloads.services.request import SubmitRequest

log = logging.getLogger("gridlane.services")

MAX_BULK = 1000
# Rows per INSERT (SQLite): well inside a statement's parameters for a workload's ~35 columns.
BULK_BATCH = 500

ELEMENT_FIELDS = (
    "owner", "group", "queue", "kind", "command", "script", "native_kind", "image", "code", "requirements",
    "gpus_milli", "cpus_milli",
    "memory_mib", "nodes", "runtime_limit_s", "priority", "array", "array_throttle",
)  # fmt: skip

Checked = list[tuple[Workload, Workload | None]]  # each item's workload, and the earlier one of its key (or None)


def check_submit_many(user: Any, items: list[tuple[SubmitRequest, str | None]]) -> Checked:
    """Validate every item of a bulk submit before anything is recorded; returns, for each item, its unsaved
    workload and the earlier workload of its idempotency key (None when the key is new or absent).

    Raises BulkRejected with every bad item's errors (by index): invalid fields, a queue the user may not use,
    a key used twice in the batch, or a key used before for a different request; SubmitRejected (on "items")
    for no items or more than MAX_BULK. Reads each queue once, and the earlier keys in one query.
    """
    if not 1 <= len(items) <= MAX_BULK:
        raise SubmitRejected({"items": [f"Send 1 to {MAX_BULK} workloads in one request."]})
    errors, first_with_key = _repeated_keys(items)
    earlier = {
        w.idempotency_key: w for w in Workload.objects.filter(owner=user, idempotency_key__in=list(first_with_key))
    } if first_with_key else {}  # fmt: skip
    contexts: dict[str, SubmitContext | SubmitRejected | QueueForbidden] = {}
    shapes: dict[SubmitRequest, Workload | SubmitRejected] = {}
    forbidden_only = not errors
    checked: Checked = []
    for index, (req, key) in enumerate(items):
        if index in errors:
            continue
        if req.queue not in contexts:
            try:
                contexts[req.queue] = submit_context(user, req.queue)
            except (SubmitRejected, QueueForbidden) as refused:
                contexts[req.queue] = refused
        found = earlier.get(key) if key is not None else None
        try:
            if found is not None:
                if found.request_fingerprint != req.fingerprint():
                    raise SubmitRejected({"idempotency_key": ["This key was already used for a different request."]})
                checked.append((found, found))  # replayed, as a single submit would be
                continue
            ctx = contexts[req.queue]
            if isinstance(ctx, Exception):
                raise ctx
            workload = check_by_shape(user, req, ctx, shapes)
        except QueueForbidden as forbidden:
            errors[index] = {"queue": [str(forbidden)]}
            continue
        except SubmitRejected as rejected:
            errors[index], forbidden_only = rejected.errors, False
            continue
        keyed(workload, req, key)
        checked.append((workload, None))
    if errors:
        raise BulkRejected(errors, status=403 if forbidden_only else 400)
    return checked


def _repeated_keys(
    items: list[tuple[SubmitRequest, str | None]],
) -> tuple[dict[int, dict[str, list[str]]], dict[str, int]]:
    """(the errors of items whose key an earlier item has, the index of each key's first item)."""
    errors: dict[int, dict[str, list[str]]] = {}
    first_with_key: dict[str, int] = {}
    for index, (_, key) in enumerate(items):
        if key is None:
            continue
        if key in first_with_key:
            errors[index] = {"idempotency_key": [f"Item {first_with_key[key]} has the same key."]}
        else:
            first_with_key[key] = index
    return errors, first_with_key


def check_by_shape(
    user: Any, req: SubmitRequest, ctx: SubmitContext, shapes: dict[SubmitRequest, Workload | SubmitRejected]
) -> Workload:
    """check_submit, once per shape: items of a bulk submit that differ only in their name and command are
    checked as one (queue, team, kind, resources, runtime, tier, room on a fabric, run-as), and each one's name
    and command on its own. Scripts, manifests and arrays, whose text decides their request, are checked whole."""
    if req.script or req.manifest or req.array:
        return check_submit(user, req, ctx)
    shape = replace(req, name="shape", command="true" if req.command else "")
    if shape not in shapes:
        try:
            shapes[shape] = check_submit(user, shape, ctx)
        except SubmitRejected as rejected:
            shapes[shape] = rejected
    found = shapes[shape]
    errors = name_and_command_errors(req, req.name)
    if isinstance(found, SubmitRejected):
        shape_errors = {f: m for f, m in found.errors.items() if f not in ("name", "command")}
        raise SubmitRejected(shape_errors | errors)
    if errors:
        raise SubmitRejected(errors)
    workload = copy.copy(found)  # its own state; the queue, team and owner it refers to are shared
    workload.pk = uuid.uuid4()
    workload.name, workload.command = req.name, req.command
    return workload


def elements(parent: Workload) -> list[Workload]:
    """One unsaved workload per index of the parent's array, recorded with the parent (do_submit_many)."""
    indexes, _ = fabric_native.array_indexes(parent.array)
    shared = {name: getattr(parent, name) for name in ELEMENT_FIELDS}
    return [
        sql.unsaved(
            Workload,
            **shared,
            name=f"{parent.name}[{i}]"[:100],
            array_parent=parent,
            array_index=i,
            token_id=parent.token_id,
        )
        for i in indexes
    ]


def do_submit_many(checked: Checked, answered_whole: bool = False) -> list[tuple[Workload, bool]]:
    """Record the new workloads of a checked bulk submit in one transaction (all or nothing) with their first
    events (an array's parent with a workload per index), and kick the worker once. Returns each item's
    workload and whether it was created now; with `answered_whole` (a single submit, answered with the
    workload's detail), each carries its first event too.

    Raises IntegrityError when a key was taken meanwhile (by a concurrent request): nothing is recorded.
    """
    new = [w for w, earlier in checked if earlier is None]
    new += [element for w in new if w.array_size for element in elements(w)]
    now = timezone.now()
    for w in new:
        w.submitted_at = w.updated_at = now
    events = [first_event(w) for w in new]
    if new:
        with transaction.atomic():
            if connection.vendor == "postgresql":
                store.insert_many(new, events)
            else:
                Workload.objects.bulk_create(new, batch_size=BULK_BATCH)
                WorkloadEvent.objects.bulk_create(events, batch_size=BULK_BATCH)
            kick.kick(kick.ADMIT)
    if answered_whole:  # a bulk submit answers with ids and states only
        for w, event in zip(new, events, strict=True):
            remember_events(w, [event])
    if new:
        log.info("%d workloads submitted in bulk by %s", len(new), new[0].owner)
    return [(w, earlier is None) for w, earlier in checked]


def submit_many(
    user: Any, items: list[tuple[SubmitRequest, str | None]], token: Any = None
) -> list[tuple[Workload, bool]]:
    """Check every item, then record them all in one transaction, or none (see check_submit_many and
    do_submit_many). A key taken by a concurrent request meanwhile: checked again once, then replayed.

    With the API `token` they are sent with, each new workload records it, and a token with a cap of its own
    has the new work counted against it first (token_cap.check: TokenCapSpent, nothing recorded)."""
    try:
        return _checked_and_recorded(user, items, token)
    except IntegrityError:
        return _checked_and_recorded(user, items, token)


def _checked_and_recorded(
    user: Any, items: list[tuple[SubmitRequest, str | None]], token: Any
) -> list[tuple[Workload, bool]]:
    checked = check_submit_many(user, items)
    with token_cap.guarded(token):  # a capped token: its row held until the work is counted and recorded
        return do_submit_many(_with_token(checked, token))


def _with_token(checked: Checked, token: Any) -> Checked:
    new = [w for w, earlier in checked if earlier is None]
    token_cap.stamp(new, token)
    token_cap.check(token, new)
    return checked
