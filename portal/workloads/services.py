"""Every change to a workload: `check_*` validates and checks access, `do_*` mutates and records.

State changes are compare-and-swap updates (`filter(pk=..., state=old).update(state=new)`) that
write a WorkloadEvent in the same transaction; a CAS that loses a race changes nothing.
"""

from __future__ import annotations

import copy
import hashlib
import json
import logging
import re
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields, replace
from dataclasses import field as dataclass_field
from datetime import datetime, timedelta
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.core.exceptions import PermissionDenied
from django.db import IntegrityError, connection, transaction
from django.db.models import Count
from django.utils import timezone

from fabrics import base as fabric_base
from fabrics import native as fabric_native
from fabrics.registry import connect, fabric_class
from portal import access, sql, words
from portal.accounts import audit, posix
from portal.code import services as code_travel
from portal.queues import tiers
from portal.queues.models import DEFAULT_TIER, Fabric, Queue, QueueTarget, WorkloadKind
from portal.worker import gpu_types, wake
from portal.workloads import context, limits, native
from portal.workloads.models import Workload, WorkloadEvent
from portal.workloads.states import FINISHED, State, can_move
from portal.workloads.templatetags.durations import duration

if TYPE_CHECKING:
    from portal.accounts.ratelimit import Charge

log = logging.getLogger("gridlane.services")

MAX_COMMAND_BYTES = 64 * 1024
MAX_GPUS_PER_NODE = 64
MAX_CPUS_PER_NODE = 1024
MAX_MEMORY_GB_PER_NODE = 16 * 1024
MAX_NODES = 1024
MAX_LEASE_HOURS = 24 * 30
NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._ -]{0,99}")
IMAGE_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/:@+-]{0,299}")
KINDS = tuple(WorkloadKind.values)  # (the enum builds the list anew on every read)


class SubmitRejected(Exception):
    """The request is not valid; `errors` maps each field to what is wrong with it."""

    def __init__(self, errors: dict[str, list[str]]) -> None:
        super().__init__(errors)
        self.errors = errors


class QueueForbidden(PermissionDenied):
    pass


class IdempotencyConflict(Exception):
    """The Idempotency-Key was used before for a different request."""


class Unconfirmed(Exception):
    """A submit on a token taken unconfirmed from what a web process keeps could not be recorded by the one
    statement that confirms the token (see submit): nothing was written or counted. Confirm the token, then
    submit again."""


class InvalidTransition(Exception):
    pass


@dataclass(frozen=True)
class SubmitRequest:
    """A submission as typed values, the same from the web form, the API and the CLI."""

    queue: str
    kind: str
    name: str
    command: str = ""
    script: str = ""
    image: str = ""
    gpus: Decimal = Decimal(0)
    cpus: Decimal = Decimal(1)
    memory_gb: Decimal = Decimal(4)
    nodes: int = 1
    runtime_limit_minutes: int | None = None
    priority: str = DEFAULT_TIER
    lease_hours: Decimal | None = None
    group: str | None = None
    resources_given: tuple[str, ...] = ()  # the resources the caller named (beside a script they must agree)
    array: str = ""  # e.g. "0-99%10": one parent, one workload per index, at most 10 running at once
    manifest: str = ""  # a Kubernetes batch/v1 Job as the user wrote it (YAML or JSON)
    code: Any = None  # {"digest": sha256} of the team's bundle, or {"git": url, "commit": sha} (portal.code)
    requirements: str = ""  # a requirements file's text: a virtual environment built on the node
    gpu_type: str = ""  # a GPU type some target of the queue has (portal/worker/gpu_types.py); "": any

    def fingerprint(self) -> str:
        # The fields as asdict() gives them (every one is flat), without its deep copy: the same digest.
        # Decimals as str() beforehand, as default=str would make them, so that the C encoder does it all.
        values = {f.name: (str(v) if isinstance(v := getattr(self, f.name), Decimal) else v) for f in fields(self)}
        return hashlib.sha256(json.dumps(values, sort_keys=True, default=str).encode()).hexdigest()


def _milli(value: Decimal) -> int | None:
    """Value x 1000 as an integer, or None when it has finer than milli precision."""
    scaled = value * 1000
    return int(scaled) if scaled == scaled.to_integral_value() else None


def _text_errors(value: str, field: str, max_bytes: int) -> list[str]:
    if "\x00" in value:
        return [f"The {field} contains a NUL character."]
    if len(value.encode("utf-8", errors="surrogatepass")) > max_bytes:
        return [f"The {field} is longer than {max_bytes // 1024} KiB."]
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return [f"The {field} is not valid UTF-8."]
    return []


@dataclass(frozen=True)
class SubmitContext:
    """What a submission to one queue reads from the database, once: the queue with its targets and their
    fabrics, the teams the user may submit to it as, and which of those the user leads. Submit-time checks
    are plain functions over this (and the request), so a submit stays within its statement budget."""

    queue: Queue
    groups: list[Any]
    leads: frozenset[int]
    # never_runs's answer for each team and shape of request (see _check_fits_somewhere), worked out once while the
    # context is kept: it reads only the queue's fabrics and the team's caps, which came with the context.
    fits: dict[tuple[Any, ...], dict[str, list[str]]] = dataclass_field(default_factory=dict, compare=False, repr=False)


def submit_context(user: Any, slug: str, generation: int | None = None) -> SubmitContext:
    """The queue (targets and fabrics in the same query) and the user's entitlement to it (one more).

    Raises SubmitRejected when there is no such enabled queue, QueueForbidden when the user may not use it.
    With the `generation` of what a context is read from (ratelimit.check_submit read it), a context this
    process read for the same caller and queue under the same generation a moment ago is used instead, with no
    statement at all (portal.workloads.context).
    """
    if generation is None:
        return _read_context(user, slug)
    key = _context_key(user, slug)
    now = timezone.now()  # before the read: what is kept is at least this new
    found = context.kept(key, generation, now)
    if found is None:
        found = _read_context(user, slug)
        context.keep(key, generation, found, now)
    return found  # type: ignore[no-any-return]


def _context_key(user: Any, slug: str) -> tuple[Any, ...]:
    """What a kept context is kept under: the database, the queue, and the caller as what it may see depends on."""
    service = access.service_of(user)
    return (connection.alias, slug, user.pk, access.is_it(user), service.pk if service is not None else None)


def _read_context(user: Any, slug: str) -> SubmitContext:
    # fabric__posix_policy: the run-as check (_check_run_as) reads each fabric's POSIX policy, in the same statement.
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


def check_submit(
    user: Any, req: SubmitRequest, known: SubmitContext | None = None, generation: int | None = None
) -> Workload:
    """Validate a submission for this user and return the unsaved workload.

    Raises SubmitRejected with every field error at once, or QueueForbidden when the user
    may not use the queue. `known` is what submit_context(user, req.queue) returned, when the caller
    has it already (a bulk submit reads it once per queue); else it is read, under `generation` where given.
    """
    errors: dict[str, list[str]] = {}

    def err(field: str, message: str) -> None:
        errors.setdefault(field, []).append(message)

    ctx = known or submit_context(user, req.queue, generation)
    queue, groups = ctx.queue, ctx.groups
    if req.group is not None:
        group = next((g for g in groups if g.slug == req.group), None)
        if group is None:
            err("group", f"You cannot submit to {queue.name} as team {req.group!r}.")
    elif len(groups) == 1:
        group = groups[0]
    else:
        group = None
        names = ", ".join(g.slug for g in groups) or "none"
        err("group", f"Say which team this is for (one of: {names}).")

    if req.kind not in KINDS:
        err("kind", f"Choose one of: {', '.join(KINDS)}.")
    elif req.kind not in queue.kinds:
        kinds = ", ".join(words.kind_label(k).lower() for k in queue.kinds)
        err("kind", f"The queue {queue.name} takes {kinds} work, not {words.kind_label(req.kind).lower()}.")

    script = None
    given = {k: getattr(req, k) for k in req.resources_given} | {"runtime_limit_minutes": req.runtime_limit_minutes}
    if (req.script or req.manifest) and req.kind in (WorkloadKind.NOTEBOOK, WorkloadKind.VM):
        err("kind", f"A batch script or a Job manifest runs as training or batch work, not as a {req.kind}.")
    if req.script and not _text_errors(req.script, "script", MAX_COMMAND_BYTES):
        script = native.check(user, queue, req.script, given, errors, req.kind)
    elif req.manifest and not req.script and not _text_errors(req.manifest, "manifest", MAX_COMMAND_BYTES):
        script = native.check_manifest(user, queue, req.manifest, given, errors, req.kind)
    array, indexes, throttle = native.check_array(req.array, script, queue, errors)
    if array and req.kind in (WorkloadKind.NOTEBOOK, WorkloadKind.VM):
        err("array", "Arrays are training or batch work.")
    name = req.name or (native.name_of(script) if script is not None else "")
    for field, messages in _name_and_command_errors(req, name).items():
        for message in messages:
            err(field, message)
    if req.image and not IMAGE_RE.fullmatch(req.image):
        err("image", "That is not a container image reference.")
    code = code_travel.check(req.code, req.requirements, errors)
    if code or req.requirements:
        if req.script or req.manifest:
            err("code", "Code and requirements travel with a command; a batch script or Job manifest brings its own.")
        elif req.kind == WorkloadKind.VM:
            err("code", "A VM lease runs no command for code to travel with.")
    if code and group is not None:
        code_travel.check_owned(code, group, errors)

    gpus_milli = _milli(req.gpus)
    if req.gpus < 0 or req.gpus > MAX_GPUS_PER_NODE:
        err("resources.gpus", f"Ask for 0 to {MAX_GPUS_PER_NODE} GPUs per node.")
    elif gpus_milli is None or (req.gpus > 1 and req.gpus != req.gpus.to_integral_value()):
        err("resources.gpus", "Fractions of a GPU go below one (e.g. 0.25); above one, ask for whole GPUs.")
    cpus_milli = _milli(req.cpus)
    if req.cpus <= 0 or req.cpus > MAX_CPUS_PER_NODE or cpus_milli is None:
        err(
            "resources.cpus",
            f"Ask for more than 0 and at most {MAX_CPUS_PER_NODE} CPUs per node, in steps of 0.001.",
        )
    if req.memory_gb <= 0 or req.memory_gb > MAX_MEMORY_GB_PER_NODE:
        err("resources.memory_gb", f"Ask for more than 0 and at most {MAX_MEMORY_GB_PER_NODE} GB per node.")
    if not 1 <= req.nodes <= MAX_NODES:
        err("resources.nodes", f"Ask for 1 to {MAX_NODES} nodes.")

    # None (not given) takes the queue's default; 0 is refused, not quietly made the default.
    runtime = queue.default_runtime_minutes if req.runtime_limit_minutes is None else req.runtime_limit_minutes
    runtime_s = runtime * 60
    if script is not None:
        runtime_s = script.runtime_s or runtime_s
        native.check_limits(script, queue, errors, MAX_GPUS_PER_NODE, MAX_CPUS_PER_NODE, MAX_NODES)
    if not 60 <= runtime_s <= queue.max_runtime_minutes * 60:
        err(
            native.field_of(script) if script is not None and script.runtime_s else "runtime_limit_minutes",
            native.time_error(script, queue)
            or f"The queue {queue.name} allows runtimes of 1 minute to {duration(queue.max_runtime_minutes * 60)}.",
        )

    if group is not None:  # the tiers its team may use came with the team (tiers.columns)
        may_lead = group.pk in ctx.leads or access.is_it(user)
        refused = tiers.check(req.priority, tiers.of_team(group), group.slug, may_lead)
        if refused:
            err("priority", refused)

    if req.gpu_type:
        refused_type = gpu_types.check(queue, req.gpu_type)
        if refused_type:
            err("gpu_type", refused_type)

    lease_s = None
    if req.lease_hours is not None:
        if req.kind not in (WorkloadKind.NOTEBOOK, WorkloadKind.VM):
            err("lease_hours", "Only notebooks and VMs have a lease.")
        elif not 0 < req.lease_hours <= MAX_LEASE_HOURS:
            err("lease_hours", f"A lease lasts more than 0 and at most {MAX_LEASE_HOURS} hours.")
        else:
            lease_s = int(req.lease_hours * 3600)

    if errors or group is None or gpus_milli is None or cpus_milli is None:
        raise SubmitRejected(errors)  # the last three are None only alongside an error
    memory_mib = int((req.memory_gb * 1024).to_integral_value())
    nodes = req.nodes
    if script is not None:
        gpus_milli, cpus_milli, memory_mib = (
            script.per_node.gpus_milli,
            script.per_node.cpus_milli,
            script.per_node.memory_mib,
        )
        nodes = script.nodes

    workload = sql.unsaved(
        Workload,
        owner=user,
        group=group,
        queue=queue,
        kind=req.kind,
        name=name,
        command=req.command,
        script=req.script or req.manifest,
        native_kind=script.kind if script is not None else "",
        image=req.image,
        code=code,
        requirements=req.requirements,
        gpu_type=req.gpu_type,
        gpus_milli=gpus_milli,
        cpus_milli=cpus_milli,
        memory_mib=memory_mib,
        nodes=nodes,
        runtime_limit_s=runtime_s,
        priority=req.priority,
        lease_s=lease_s,
        array=array,
        array_size=len(indexes),
        array_throttle=throttle or None,
    )
    _check_fits_somewhere(workload, queue, lambda fabric: limits.cap_read(group, fabric.pk), ctx.fits)
    return workload


def _name_and_command_errors(req: SubmitRequest, name: str) -> dict[str, list[str]]:
    """The checks of a submission's name and of what it runs (command, script or manifest) as text: the part of
    check_submit that differs between the items of a bulk submit of one shape (see check_submit_many)."""
    errors: dict[str, list[str]] = {}
    if not NAME_RE.fullmatch(name):
        errors["name"] = ["Use 1-100 letters, digits, spaces, '.', '_' or '-', starting with a letter or digit."]
    if sum(map(bool, (req.command, req.script, req.manifest))) > 1:
        errors["command"] = ["Give one of a command, a script or a manifest."]
    elif not (req.command.strip() or req.script.strip() or req.manifest.strip()) and req.kind not in (
        WorkloadKind.NOTEBOOK,
        WorkloadKind.VM,
    ):
        # Only spaces would "succeed" at once, having run nothing.
        errors["command"] = [
            "Give the command to run." if not req.command else "The command is only spaces: give one to run."
        ]
    for field, value in (("command", req.command), ("script", req.script), ("manifest", req.manifest)):
        for message in _text_errors(value, field, MAX_COMMAND_BYTES):
            errors.setdefault(field, []).append(message)
    return errors


def _check_fits_somewhere(
    workload: Workload,
    queue: Queue,
    cap_of: Callable[[Fabric], limits.Cap],
    known: dict[tuple[Any, ...], dict[str, list[str]]] | None = None,
) -> None:
    """Refuse at once what no fabric behind the queue could ever hold, rather than leave it pending forever.
    `known`: never_runs's answers for this queue, its fabrics and the teams' caps as they are now (a kept
    context's), by team and shape of request."""
    fabrics = [t.fabric for t in queue.targets.all() if t.fabric.enabled]
    if workload.native_kind:  # a script runs only where its kind of scheduler reads it
        fabrics = [f for f in fabrics if f.kind == workload.native_kind]
    if not fabrics:
        raise SubmitRejected({"queue": [f"The queue {queue.name} has no fabric behind it yet; ask IT."]})
    shape = (workload.group_id, workload.native_kind, workload.nodes, workload.gpus_milli, workload.cpus_milli,
             workload.memory_mib)  # fmt: skip
    errors = None if known is None else known.get(shape)
    if errors is None:
        errors = never_runs(workload, queue.name, fabrics, cap_of)
        if known is not None:
            known[shape] = errors
    if errors:
        raise SubmitRejected({field: list(messages) for field, messages in errors.items()})  # its own to change
    _check_run_as(workload, queue, fabrics)


def never_runs(
    workload: Workload, queue_name: str, fabrics: list[Fabric], cap_of: Callable[[Fabric], limits.Cap]
) -> dict[str, list[str]]:
    """Why no fabric behind a queue could ever start this workload for its team, as field errors; {} when one
    could. A plain function over what the submit loaded (the queue's fabrics, the team's caps on each).

    Each fabric is tried in steps (big enough, enough nodes, the fabric's own rule, the team's cap); the reason
    given is the one of the fabric that got furthest, the most useful to the person asking."""
    need = workload.total
    furthest: tuple[int, dict[str, list[str]]] = (-1, {})

    def refuse(step: int, field: str, message: str) -> None:
        nonlocal furthest
        if step > furthest[0]:
            furthest = (step, {field: [message]})

    for fabric in fabrics:
        if not need.fits_in(fabric.capacity):
            refuse(0, "resources", _too_big(queue_name, fabrics))
            continue
        most_nodes = getattr(fabric_class(fabric.kind), "MAX_NODES", None)  # e.g. local: this one host
        if most_nodes is not None and workload.nodes > most_nodes:
            refuse(1, "resources.nodes", f"The queue {queue_name} runs on {fabric.name}, which has "
                   f"{words.count(most_nodes, 'node')}: ask for at most {most_nodes}.")  # fmt: skip
            continue
        check = getattr(fabric_class(fabric.kind), "check_request", None)  # e.g. Kubernetes: whole GPUs only
        try:
            if check is not None:
                check(fabric.resolved_settings(), workload.per_node)
        except ValueError as error:
            refuse(2, "resources.gpus", str(error))
            continue
        over = limits.over_cap(need.gpus_milli, need.cpus_milli, need.memory_mib, cap_of(fabric))
        if over:
            where = f"on {fabric.name}" if len(fabrics) == 1 else f"on any fabric behind {queue_name}"
            refuse(3, "resources", f"Your team {workload.group.name} may hold at most that much {where}: "
                   f"this asks for {over}. Ask for less, or ask IT or your team lead to raise the limit.")  # fmt: skip
            continue
        return {}
    return furthest[1]


def _too_big(queue_name: str, fabrics: list[Fabric]) -> str:
    biggest = max(fabrics, key=lambda f: (f.gpus_milli, f.cpus_milli, f.memory_mib))
    return (
        f"No fabric behind {queue_name} is that big: the largest has {words.gpus(biggest.gpus_milli / 1000)}, "
        f"{words.cpus(biggest.cpus_milli / 1000)} and {words.number(biggest.memory_mib / 1024, 1)} GB in all."
    )


def _check_run_as(workload: Workload, queue: Queue, fabrics: list[Any]) -> None:
    """Refuse, before anything is queued, a person with no POSIX account on a fabric behind the queue that
    runs jobs as their owners. The policies came with the queue; the person's names are a cached lookup."""
    refused = posix.refusals(workload.owner_id, fabrics)
    if refused:
        raise SubmitRejected(
            {"queue": [f"Jobs on {queue.name} run under your own account on the cluster, but {refused[0]}."]}
        )


def submit(
    user: Any,
    req: SubmitRequest,
    idempotency_key: str | None = None,
    generation: int | None = None,
    charge: Charge | None = None,
    unconfirmed: int | None = None,
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
    context for the caller and queue (one statement in all: see _submit_kept); else first, on its own, as
    ratelimit.check_submit counts.

    With `unconfirmed`, the generation the caller's token was kept under (portal.api.auth), the token is confirmed
    by that statement, which is then sent only with a context kept under the same generation; Unconfirmed is
    raised, before anything is written or counted, when the submit cannot go that way.
    """
    if charge is not None:
        if connection.vendor == "postgresql" and not req.array:
            kept = context.latest(_context_key(user, req.queue))
            if kept is not None and unconfirmed in (None, kept[0]):
                return _submit_kept(user, req, idempotency_key, charge, *kept, unconfirmed=unconfirmed is not None)
        if unconfirmed is not None:
            raise Unconfirmed
        generation = charge.count()
    try:
        workload = check_submit(user, req, generation=generation)
    except (SubmitRejected, QueueForbidden):
        # A repeat of a request accepted once is answered with its workload, even if it would be refused
        # now (its queue disabled since, say).
        existing = _replay(user, req, idempotency_key) if idempotency_key else None
        if existing is None:
            raise
        return existing, False
    _keyed(workload, req, idempotency_key)
    if workload.array_size:
        try:
            do_submit_many([(workload, None)], answered_whole=True)
            return workload, True
        except IntegrityError:
            if not idempotency_key:
                raise
    elif _insert(workload):
        return workload, True
    return _replayed(user, req, idempotency_key, workload), False


def _submit_kept(
    user: Any,
    req: SubmitRequest,
    idempotency_key: str | None,
    charge: Charge,
    generation: int,
    ctx: SubmitContext,
    unconfirmed: bool = False,
) -> tuple[Workload, bool]:
    """submit() with a context kept under `generation`, and the rate limit counted in the statement that records
    the workload, which does so only while the generation is still that one (see _insert). When it has moved,
    nothing was written or counted, and the submit goes the whole way: counted, its context read again.

    A refusal by the kept context is counted on its own (every submission counts, refused or not), and is
    answered only if the generation has not moved meanwhile; else the submit goes the whole way.

    When the caller's token is `unconfirmed`, both of those raise Unconfirmed instead, with nothing written: a
    refusal would be counted, and answered, for a token that may no longer be used."""
    try:
        workload = check_submit(user, req, ctx)
    except (SubmitRejected, QueueForbidden):
        if unconfirmed:
            raise Unconfirmed from None
        now = charge.count()
        if now != generation:  # what refused it may have changed since: read it again
            return submit(user, req, idempotency_key, generation=now)
        existing = _replay(user, req, idempotency_key) if idempotency_key else None
        if existing is None:
            raise
        return existing, False
    _keyed(workload, req, idempotency_key)
    inserted = _insert(workload, (generation, charge))
    if inserted is None:  # the generation moved: counted now, with the context read under the new one
        if unconfirmed:
            raise Unconfirmed
        return submit(user, req, idempotency_key, generation=charge.count())
    if inserted:
        return workload, True
    return _replayed(user, req, idempotency_key, workload), False


def _keyed(workload: Workload, req: SubmitRequest, key: str | None) -> None:
    """Give a checked workload its idempotency key, and the fingerprint of its request that a repeat with the same
    key is compared with (_replay). Work submitted without a key is never replayed: it keeps no fingerprint."""
    workload.idempotency_key = key or None
    workload.request_fingerprint = req.fingerprint() if key else ""


def _replayed(user: Any, req: SubmitRequest, idempotency_key: str | None, workload: Workload) -> Workload:
    """The workload a submit whose insert did nothing answers with: the earlier one with its key (or the one of a
    request that won the race)."""
    existing = _replay(user, req, idempotency_key) if idempotency_key else None
    if existing is None:
        raise IntegrityError(f"workload {workload.pk} was not inserted and no earlier one has its key")
    return existing


ELEMENT_FIELDS = (
    "owner", "group", "queue", "kind", "command", "script", "native_kind", "image", "code", "requirements",
    "gpus_milli", "cpus_milli",
    "memory_mib", "nodes", "runtime_limit_s", "priority", "array", "array_throttle",
)  # fmt: skip


def _elements(parent: Workload) -> list[Workload]:
    """One unsaved workload per index of the parent's array. The parent and its elements are recorded together
    by the bulk submit (do_submit_many): one transaction, all or nothing."""
    indexes, _ = fabric_native.array_indexes(parent.array)
    common = {name: getattr(parent, name) for name in ELEMENT_FIELDS}
    return [
        sql.unsaved(Workload, **common, name=f"{parent.name}[{i}]"[:100], array_parent=parent, array_index=i)
        for i in indexes
    ]


def _replay(user: Any, req: SubmitRequest, key: str) -> Workload | None:
    """The earlier workload for this key, or None when the key is new."""
    existing = Workload.objects.filter(owner=user, idempotency_key=key).first()
    if existing is not None and existing.request_fingerprint != req.fingerprint():
        raise IdempotencyConflict("This Idempotency-Key was already used for a different request.")
    return existing


def do_submit(workload: Workload) -> Workload:
    """Record a checked workload (see check_submit). Raises IntegrityError when its idempotency key is taken."""
    if _insert(workload) is not True:
        raise IntegrityError(f"the idempotency key {workload.idempotency_key!r} is taken")
    return workload


def _first_event(workload: Workload) -> WorkloadEvent:
    return sql.unsaved(
        WorkloadEvent,
        workload=workload, at=workload.submitted_at, actor=workload.owner, to_state=State.PENDING, reason="submitted",
    )  # fmt: skip


def _insert(workload: Workload, guard: tuple[int, Charge] | None = None) -> bool | None:
    """Insert the workload with its first event and kick the worker; False (nothing written) when another
    workload of the same owner has its idempotency key.

    On PostgreSQL, one statement (a round trip, atomic on its own): the workload's insert, the event's
    insert from what it returned, and the NOTIFY, delivered when it commits. Elsewhere, a transaction.

    With a `guard` (PostgreSQL: a generation, and a rate-limit charge), the same statement does all that only
    while the generation is still that one, and counts the charge then: None when it has moved (nothing
    written, nothing counted); RateLimited raised when the count is over the limit (then only the count was
    written: a refused submit counts, as one counted on its own does).
    """
    workload.submitted_at = workload.updated_at = timezone.now()
    event = _first_event(workload)
    if connection.vendor == "postgresql":
        kick = [wake.CHANNEL, wake.ADMIT] if settings.GRIDLANE_KICK_WORKER else []
        statement, params = _insert_statement(workload, event, guard, bool(kick))
        with sql.prepared() as cursor:
            cursor.execute(statement, params + kick)
            row = cursor.fetchone()
        if guard is not None:
            generation, count, event.pk = row[:3]  # always one row (then the kick's, when sent)
            if generation != guard[0]:
                context.seen(generation)
                return None
            guard[1].settle(count)
        elif row is not None:
            event.pk = row[0]
        if event.pk is None:
            return False
        for saved in (workload, event):  # as save() leaves them: a later save() updates
            saved._state.adding, saved._state.db = False, connection.alias
    else:
        try:
            with transaction.atomic():
                workload.save(force_insert=True)
                event.save(force_insert=True)
                kick_worker(wake.ADMIT)
        except IntegrityError:
            if workload.idempotency_key is None:
                raise
            return False
    _remember_events(workload, [event])
    log.info("workload %s submitted to %s by %s", workload.pk, workload.queue.slug, workload.owner)
    return True


def _insert_statement(
    workload: Workload, event: WorkloadEvent, guard: tuple[int, Charge] | None, kick: bool
) -> tuple[str, list[Any]]:
    """_insert's statement and its parameters (the kick's two last, when `kick`). The event's row comes from the
    workload's RETURNING: no workload inserted, no event either. With a guard, the workload's row comes from
    the charge's count, when it is within the limit, and the count only while the generation is the guard's;
    the statement always answers one row: the generation now, the count (NULL when not counted), the event's
    id (NULL when none was inserted)."""
    e_sql, e_params = sql.insert_select_sql(event, "w")
    if guard is None:
        w_sql, w_params = sql.insert_sql(workload, ignore_conflicts=True)
        notify = ", pg_notify(%s, %s)" if kick else ""
        statement = f"WITH w AS ({w_sql} RETURNING 1), e AS ({e_sql} RETURNING id) SELECT e.id{notify} FROM e"  # noqa: S608
        return statement, [*w_params, *e_params]
    generation, charge = guard
    c_sql, c_params = charge.sql("g")
    w_sql, w_params = sql.insert_select_sql(workload, 'counted WHERE counted."count" <= %s', ignore_conflicts=True)
    notify = ", (SELECT pg_notify(%s, %s) FROM e)" if kick else ""
    statement = (
        f"WITH g AS (SELECT 1 FROM {context.GENERATION_TABLE} WHERE n = %s), {c_sql}, "  # noqa: S608 (our tables)
        f"w AS ({w_sql} RETURNING 1), e AS ({e_sql} RETURNING id) "
        f'SELECT {context.GENERATION_SQL}, (SELECT "count" FROM counted), (SELECT id FROM e){notify}'
    )
    return statement, [generation, *c_params, *w_params, charge.limit, *e_params]


def _remember_events(workload: Workload, events: list[WorkloadEvent]) -> None:
    """Let `workload.events.all()` answer from memory (the API's answer to a submit)."""
    sql.prefetched(workload, "events", events)


# --- Bulk submit ----------------------------------------------------------------------------------------

MAX_BULK = 1000


class BulkRejected(Exception):
    """Some items of a bulk submit are not valid: `errors` maps each bad item's index to its field errors.
    Nothing was recorded. `status` is 403 when the only problem is queues the user may not use."""

    def __init__(self, errors: dict[int, dict[str, list[str]]], status: int = 400) -> None:
        super().__init__(errors)
        self.errors = errors
        self.status = status


def check_submit_many(
    user: Any, items: list[tuple[SubmitRequest, str | None]]
) -> list[tuple[Workload, Workload | None]]:
    """Validate every item of a bulk submit before anything is recorded; returns, for each item, its unsaved
    workload and the earlier workload of its idempotency key (None when the key is new or absent).

    Raises BulkRejected with every bad item's errors (by index): invalid fields, a queue the user may not use,
    a key used twice in the batch, or a key used before for a different request; SubmitRejected (on "items")
    for no items or more than MAX_BULK. Reads each queue once, and
    the earlier keys in one query.
    """
    if not 1 <= len(items) <= MAX_BULK:
        raise SubmitRejected({"items": [f"Send 1 to {MAX_BULK} workloads in one request."]})
    errors: dict[int, dict[str, list[str]]] = {}
    contexts: dict[str, SubmitContext | SubmitRejected | QueueForbidden] = {}
    forbidden_only = True
    first_with_key: dict[str, int] = {}
    for index, (_, key) in enumerate(items):
        if key is None:
            continue
        if key in first_with_key:
            errors[index] = {"idempotency_key": [f"Item {first_with_key[key]} has the same key."]}
        else:
            first_with_key[key] = index
    earlier = {
        w.idempotency_key: w for w in Workload.objects.filter(owner=user, idempotency_key__in=list(first_with_key))
    } if first_with_key else {}  # fmt: skip
    checked: list[tuple[Workload, Workload | None]] = []
    shapes: dict[SubmitRequest, Workload | SubmitRejected] = {}
    for index, (req, key) in enumerate(items):
        if index in errors:
            forbidden_only = False
            continue
        if req.queue not in contexts:
            try:
                contexts[req.queue] = submit_context(user, req.queue)
            except (SubmitRejected, QueueForbidden) as refused:
                contexts[req.queue] = refused
        found = earlier.get(key) if key is not None else None
        if found is not None:
            if found.request_fingerprint != req.fingerprint():
                errors[index] = {"idempotency_key": ["This key was already used for a different request."]}
                forbidden_only = False
            else:
                checked.append((found, found))  # replayed, as a single submit would be
            continue
        ctx = contexts[req.queue]
        try:
            if isinstance(ctx, Exception):
                raise ctx
            workload = _check_by_shape(user, req, ctx, shapes)
        except QueueForbidden as forbidden:
            errors[index] = {"queue": [str(forbidden)]}
            continue
        except SubmitRejected as rejected:
            errors[index] = rejected.errors
            forbidden_only = False
            continue
        _keyed(workload, req, key)
        checked.append((workload, None))
    if errors:
        raise BulkRejected(errors, status=403 if forbidden_only else 400)
    return checked


def _check_by_shape(
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
    errors = _name_and_command_errors(req, req.name)
    if isinstance(found, SubmitRejected):
        shape_errors = {f: m for f, m in found.errors.items() if f not in ("name", "command")}
        raise SubmitRejected(shape_errors | errors)
    if errors:
        raise SubmitRejected(errors)
    workload = copy.copy(found)  # its own state; the queue, team and owner it refers to are shared
    workload.pk = uuid.uuid4()
    workload.name, workload.command = req.name, req.command
    return workload


def do_submit_many(
    checked: list[tuple[Workload, Workload | None]], answered_whole: bool = False
) -> list[tuple[Workload, bool]]:
    """Record the new workloads of a checked bulk submit in one transaction (all or nothing) with their first
    events (an array's parent with a workload per index), and kick the worker once. Returns each item's
    workload and whether it was created now; with `answered_whole` (a single submit, answered with the
    workload's detail), each carries its first event too.

    Raises IntegrityError when a key was taken meanwhile (by a concurrent request): nothing is recorded.
    """
    new = [w for w, earlier in checked if earlier is None]
    new += [element for w in new if w.array_size for element in _elements(w)]  # an array: its elements too
    now = timezone.now()
    for w in new:
        w.submitted_at = w.updated_at = now
    events = [_first_event(w) for w in new]
    if new:
        with transaction.atomic():
            if connection.vendor == "postgresql":
                sql.copy_insert(new)
                sql.copy_insert(events)
            else:
                Workload.objects.bulk_create(new, batch_size=BULK_BATCH)
                WorkloadEvent.objects.bulk_create(events, batch_size=BULK_BATCH)
            kick_worker(wake.ADMIT)
    if answered_whole:  # a bulk submit answers with ids and states only
        for w, event in zip(new, events, strict=True):
            _remember_events(w, [event])
    if new:
        log.info("%d workloads submitted in bulk by %s", len(new), new[0].owner)
    return [(w, earlier is None) for w, earlier in checked]


# Rows per INSERT: well inside PostgreSQL's 65,535 parameters per statement for a workload's ~35 columns.
BULK_BATCH = 500


def submit_many(user: Any, items: list[tuple[SubmitRequest, str | None]]) -> list[tuple[Workload, bool]]:
    """Check every item, then record them all in one transaction, or none (see check_submit_many and
    do_submit_many). A key taken by a concurrent request meanwhile: checked again once, then replayed."""
    try:
        return do_submit_many(check_submit_many(user, items))
    except IntegrityError:
        return do_submit_many(check_submit_many(user, items))


def transition(
    workload: Workload,
    new: State,
    *,
    actor: Any = None,
    reason: str = "",
    **fields: Any,
) -> bool:
    """Move the workload from its current state to `new` if nobody moved it first.

    Returns False, changing nothing, when the stored state is no longer `workload.state`.
    """
    old = State(workload.state)
    if not can_move(old, new):
        raise InvalidTransition(f"{old} -> {new} is not a workload transition")
    now = timezone.now()
    stamps: dict[str, Any] = {"updated_at": now}
    if new == State.ADMITTED:
        stamps["admitted_at"] = now
    elif new == State.RUNNING:
        stamps["started_at"] = fields.pop("started_at", None) or now
        if workload.lease_s:
            stamps["lease_ends_at"] = stamps["started_at"] + timedelta(seconds=workload.lease_s)
    elif new in FINISHED:
        stamps["finished_at"] = fields.pop("finished_at", None) or now
    if new != State.PENDING and old == State.PENDING:
        stamps |= {"pending_reason": "", "pending_reason_code": "", "estimated_start": None, "queue_position": 0}
    values = {**stamps, **fields, "state": new}
    with transaction.atomic():
        if Workload.objects.filter(pk=workload.pk, state=old).update(**values) != 1:
            return False  # another worker or request got there first
        WorkloadEvent.objects.create(
            workload=workload, at=now, actor=actor, from_state=old, to_state=new, reason=reason[:500]
        )
    for key, value in values.items():
        setattr(workload, key, value)
    if new in FINISHED and workload.array_parent_id is not None:
        settle_array(workload.array_parent_id)
    return True


def settle_array(parent_id: Any) -> None:
    """Once an array's last element has ended, its parent ends: succeeded when every element did, failed when
    one failed or expired, else cancelled. One query while elements still run."""
    counts = dict(
        Workload.objects.filter(array_parent_id=parent_id).values_list("state").annotate(n=Count("pk")).order_by()
    )
    if any(state not in FINISHED for state in counts):
        return
    parent = Workload.objects.filter(pk=parent_id, state=State.PENDING).first()
    if parent is None:
        return  # cancelled already
    if set(counts) <= {State.SUCCEEDED}:
        outcome = State.SUCCEEDED
    elif counts.keys() & {State.FAILED, State.EXPIRED}:
        outcome = State.FAILED
    else:
        outcome = State.CANCELLED
    said = ", ".join(f"{n} {state}" for state, n in sorted(counts.items()))
    transition(parent, outcome, reason=f"every element has ended: {said}")


def transition_many(
    ids: list[Any],
    old: State,
    new: State,
    *,
    reason: str,
    actor: Any = None,
    each: Mapping[str, Mapping[Any, str]] | None = None,
    **fields: Any,
) -> list[Any]:
    """Move many workloads from `old` to `new` at once (the scheduler's admissions): lock the rows that are
    still in `old`, update them in one statement and write their events in one insert. Returns the ids moved;
    the others had moved on (cancelled, say) and are left alone.

    `each`: text columns and each row's own value for them (column -> id -> value; a dispatch's rendered
    scripts), set by the same UPDATE: one new version of each row, not one more per column."""
    if not can_move(old, new):
        raise InvalidTransition(f"{old} -> {new} is not a workload transition")
    now = timezone.now()
    stamps: dict[str, Any] = {"updated_at": now, "state": new}
    if new == State.ADMITTED:
        stamps["admitted_at"] = now
    if old == State.PENDING:
        stamps |= {"pending_reason": "", "pending_reason_code": "", "estimated_start": None, "queue_position": 0}
    if connection.vendor == "postgresql":
        return _transition_many_pg(ids, old, new, reason[:500], actor, stamps | fields, each)
    moved: list[Any] = []
    with transaction.atomic():
        for start in range(0, len(ids), 500):
            chunk = ids[start : start + 500]
            won = list(
                Workload.objects.select_for_update().filter(pk__in=chunk, state=old).values_list("pk", flat=True)
            )
            if not won:
                continue
            Workload.objects.filter(pk__in=won).update(**stamps, **fields)
            for name, by_pk in (each or {}).items():
                sql.set_each(Workload, name, {pk: by_pk[pk] for pk in won})
            WorkloadEvent.objects.bulk_create(
                WorkloadEvent(workload_id=pk, at=now, actor=actor, from_state=old, to_state=new, reason=reason[:500])
                for pk in won
            )
            moved += won
    return moved


def _transition_many_pg(
    ids: list[Any],
    old: State,
    new: State,
    reason: str,
    actor: Any,
    values: dict[str, Any],
    each: Mapping[str, Mapping[Any, str]] | None,
) -> list[Any]:
    """transition_many in one statement on PostgreSQL: a compare-and-swap UPDATE of every row still in `old`
    (the others are left alone, as the row lock's re-check decides), and their events inserted from what it
    returned. One round trip for any number of workloads. With `each`, the ids and each column's values go as
    arrays, unnested into a join (as sql.set_each's)."""
    qn = connection.ops.quote_name
    sets, params = [], []
    for name, value in values.items():
        column, field = sql.field_of(Workload, name)
        sets.append(f"{column} = %s")
        params.append(field.get_db_prep_save(value, connection))
    keys = [str(pk) for pk in ids]
    if not each:
        rows, match = "", "t.id = ANY(%s::uuid[])"
        params.append(keys)
    else:
        per_column = []
        for i, (name, by_pk) in enumerate(each.items()):
            sets.append(f"{sql.field_of(Workload, name)[0]} = v.c{i}")  # text, refused when too long: as set_each
            per_column.append([by_pk[pk] for pk in ids])
        arrays, names = ", %s::text[]" * len(each), "".join(f", c{i}" for i in range(len(each)))
        rows, match = f" FROM unnest(%s::uuid[]{arrays}) AS v(key{names})", "t.id = v.key"
        params += [keys, *per_column]
    event = WorkloadEvent._meta
    columns = ", ".join(
        sql.field_of(WorkloadEvent, f)[0] for f in ("workload", "at", "actor", "from_state", "to_state", "reason")
    )
    statement = (
        f"WITH won AS (UPDATE {qn(Workload._meta.db_table)} AS t SET {', '.join(sets)}{rows} "  # noqa: S608 (our own names; values are parameters)
        f"WHERE {match} AND t.state = %s RETURNING t.id), "
        f"e AS (INSERT INTO {qn(event.db_table)} ({columns}) SELECT id, %s, %s, %s, %s, %s FROM won) "
        "SELECT id FROM won"
    )
    actor_id = getattr(actor, "pk", actor)
    with sql.prepared(binary_lists=True) as cursor:  # one statement: atomic on its own
        cursor.execute(statement, [*params, old, values["updated_at"], actor_id, old, new, reason])
        return [row[0] for row in cursor.fetchall()]


def start_many(starts: list[tuple[Workload, datetime | None, str]], *, reason: str) -> list[Workload]:
    """dispatching -> running for many workloads at once (a sync that found a batch's jobs started), each with
    its own start time (None: now) and host; on PostgreSQL one statement (a compare-and-swap UPDATE of the rows
    still dispatching, and their events from what it returned), elsewhere `transition` each. Returns those
    moved, their fields set; the others had moved on (a cancel) and are left alone. Leases take `transition`
    (their end follows from the start)."""
    now = timezone.now()

    def one(w: Workload, at: datetime | None, host: str) -> bool:
        return transition(w, State.RUNNING, reason=reason, started_at=at, host=host, pending_reason="",
                          estimated_start=None)  # fmt: skip

    plain = [(w, at or now, host) for w, at, host in starts if not w.lease_s and w.state == State.DISPATCHING]
    moved = [w for w, at, host in starts if (w.lease_s or w.state != State.DISPATCHING) and one(w, at, host)]
    if not plain:
        return moved
    if connection.vendor != "postgresql":
        return moved + [w for w, at, host in plain if one(w, at, host)]
    qn = connection.ops.quote_name
    col = {name: sql.field_of(Workload, name)[0] for name in ("state", "updated_at", "started_at", "host",
                                                               "pending_reason", "estimated_start")}  # fmt: skip
    events = ", ".join(
        sql.field_of(WorkloadEvent, f)[0] for f in ("workload", "at", "actor", "from_state", "to_state", "reason")
    )
    table = qn(Workload._meta.db_table)
    statement = (
        f"WITH v AS (SELECT * FROM unnest(%s::uuid[], %s::timestamptz[], %s::text[]) AS v(id, started, host)), "  # noqa: S608 (our own names; values are parameters)
        f"won AS (UPDATE {table} w SET {col['state']} = %s, {col['updated_at']} = %s, {col['started_at']} = v.started, "
        f"{col['host']} = v.host, {col['pending_reason']} = '', {col['estimated_start']} = NULL "
        f"FROM v WHERE w.id = v.id AND w.{col['state']} = %s RETURNING w.id), "
        f"e AS (INSERT INTO {qn(WorkloadEvent._meta.db_table)} ({events}) "
        f"SELECT id, %s, NULL, %s, %s, %s FROM won) "
        "SELECT id FROM won"
    )
    params: list[Any] = [
        [str(w.pk) for w, _, _ in plain],
        [at for _, at, _ in plain],
        [host for _, _, host in plain],
        State.RUNNING, now, State.DISPATCHING,
        now, State.DISPATCHING, State.RUNNING, reason[:500],
    ]  # fmt: skip
    with sql.prepared(binary_lists=True) as cursor:  # one statement: atomic on its own
        cursor.execute(statement, params)
        won = {str(row[0]) for row in cursor.fetchall()}
    for w, at, host in plain:
        if str(w.pk) in won:
            w.state, w.updated_at, w.started_at, w.host = State.RUNNING, now, at, host
            w.pending_reason, w.estimated_start = "", None
            moved.append(w)
    return moved


@dataclass(frozen=True)
class End:
    """How a running workload's job ended, as a sync found it (finish_many)."""

    workload: Workload
    state: State
    reason: str
    exit_code: int | None
    finished_at: datetime | None
    log_tail: str
    host: str


def finish_many(ends: list[End]) -> list[Workload]:
    """running -> its end (succeeded, failed, expired, cancelled) for many workloads at once, each with its own
    state, reason, exit code, end time, output and host: a sync that found a batch's jobs ended. On PostgreSQL
    one statement (a compare-and-swap UPDATE of the rows still running, and their events from what it
    returned), elsewhere `transition` each. A notebook's endpoint goes with its server. Returns those moved,
    their fields set; the others had moved on (a cancel, a preemption) and are left alone."""
    now = timezone.now()

    def values_of(end: End) -> dict[str, Any]:
        return {"exit_code": end.exit_code, "finished_at": end.finished_at or now, "log_tail": end.log_tail,
                "host": end.host, "notebook_endpoint": None}  # fmt: skip

    plain = [e for e in ends if e.workload.state == State.RUNNING and e.state in FINISHED]
    if connection.vendor != "postgresql":
        moved = [e.workload for e in plain if transition(e.workload, e.state, reason=e.reason, **values_of(e))]
    elif plain:
        qn = connection.ops.quote_name
        col = {name: sql.field_of(Workload, name)[0] for name in (
            "state", "updated_at", "finished_at", "exit_code", "log_tail", "host", "notebook_endpoint",
        )}  # fmt: skip
        events = ", ".join(
            sql.field_of(WorkloadEvent, f)[0] for f in ("workload", "at", "actor", "from_state", "to_state", "reason")
        )
        table = qn(Workload._meta.db_table)
        statement = (
            "WITH v AS (SELECT * FROM unnest(%s::uuid[], %s::text[], %s::text[], %s::int[], %s::timestamptz[], "  # noqa: S608 (our own names; values are parameters)
            "%s::text[], %s::text[]) AS v(id, state, reason, exit_code, finished, tail, host)), "
            f"won AS (UPDATE {table} w SET {col['state']} = v.state, {col['updated_at']} = %s, "
            f"{col['finished_at']} = v.finished, {col['exit_code']} = v.exit_code, {col['log_tail']} = v.tail, "
            f"{col['host']} = v.host, {col['notebook_endpoint']} = NULL "
            f"FROM v WHERE w.id = v.id AND w.{col['state']} = %s RETURNING w.id, v.state, v.reason), "
            f"e AS (INSERT INTO {qn(WorkloadEvent._meta.db_table)} ({events}) "
            "SELECT id, %s, NULL, %s, state, reason FROM won) "
            "SELECT id FROM won"
        )
        params: list[Any] = [
            [str(e.workload.pk) for e in plain],
            [str(e.state) for e in plain],
            [e.reason[:500] for e in plain],
            [e.exit_code for e in plain],
            [e.finished_at or now for e in plain],
            [e.log_tail for e in plain],
            [e.host for e in plain],
            now, State.RUNNING,
            now, State.RUNNING,
        ]  # fmt: skip
        with connection.cursor() as cursor:  # one statement: atomic on its own
            cursor.execute(statement, params)
            won = {str(row[0]) for row in cursor.fetchall()}
        moved = []
        for e in plain:
            if str(e.workload.pk) in won:
                for key, value in {**values_of(e), "state": e.state, "updated_at": now}.items():
                    setattr(e.workload, key, value)
                moved.append(e.workload)
        for parent_id in {w.array_parent_id for w in moved if w.array_parent_id is not None}:
            settle_array(parent_id)
    else:
        moved = []
    return moved


def check_cancel(user: Any, workload: Workload) -> None:
    if not access.can_manage(user, workload):
        raise PermissionDenied("Only the owner, a team lead or IT may cancel this workload.")


def do_cancel(user: Any, workload: Workload, reason: str = "cancelled") -> Workload:
    """Cancel at once what holds nothing on a fabric; ask the worker to stop the rest.

    Already finished or already cancelling work is left as it is.
    """
    if workload.is_array:
        return _cancel_array(user, workload, reason)
    for _ in range(5):  # the worker may move the state under us; try again from what is stored now
        state = State(workload.state)
        if state in FINISHED or state == State.CANCELLING:
            return workload
        target = State.CANCELLED if state in (State.PENDING, State.ADMITTED) else State.CANCELLING
        with transaction.atomic():
            moved = transition(workload, target, actor=user, reason=reason)
            if moved:  # recorded like an extension: who, what, and the state it was in
                audit.record("workload.cancelled", audit_target(workload), actor=user, team=workload.group.slug,
                             state=state.value)  # fmt: skip
        if moved:
            kick_worker()
            return workload
        workload.refresh_from_db()
    raise RuntimeError(f"workload {workload.pk} kept changing state while being cancelled")


def _cancel_array(user: Any, parent: Workload, reason: str) -> Workload:
    """Cancel every element that has not ended (waiting ones at once, in two statements), then the parent."""
    elements = Workload.objects.filter(array_parent=parent)
    for old in (State.PENDING, State.ADMITTED):
        ids = list(elements.filter(state=old).values_list("pk", flat=True))
        if ids:
            transition_many(ids, old, State.CANCELLED, reason=reason, actor=user, finished_at=timezone.now())
    for element in elements.filter(state__in=[State.DISPATCHING, State.RUNNING, State.PREEMPTED]):
        do_cancel(user, element, reason)
    if parent.state == State.PENDING:
        transition(parent, State.CANCELLED, actor=user, reason=reason)
    kick_worker()
    return parent


def audit_target(workload: Workload) -> str:
    """How the audit log names a workload: by its name, with its id to find it by."""
    return f"{workload.name} ({workload.pk})"


def check_reprioritize(user: Any, workload: Workload, priority: str) -> None:
    """Raises SubmitRejected for a bad or late change (a tier the team may not use), PermissionDenied when the
    user may not make it."""
    # Only leads and IT may make the change at all, so a tier for leads only is no obstacle here.
    refused = tiers.check(priority, tiers.for_team(workload.group_id), workload.group.slug, may_lead=True)
    if refused:
        raise SubmitRejected({"priority": [refused]})
    if not access.may_reprioritize(user, workload):
        raise PermissionDenied("Only the team's leads or IT may change a workload's priority.")
    if workload.state in FINISHED:
        raise SubmitRejected({"priority": [f"The workload has already {workload.state}."]})


def do_reprioritize(user: Any, workload: Workload, priority: str) -> Workload:
    """Set the priority tier of unfinished work; the next cycle orders the queue by it. Work a fabric holds but
    has not started (dispatching) is reordered inside the fabric too, where the fabric has priorities of its
    own (Slurm, PBS); a fabric that refuses keeps its own order, and the audit record says so."""
    old = workload.priority
    if old == priority:
        return workload
    with transaction.atomic():
        changed = Workload.objects.filter(pk=workload.pk).exclude(state__in=FINISHED).update(priority=priority)
    workload.refresh_from_db()
    if changed:
        fabric = _reorder_in_fabric(workload, old, priority)
        audit.record("workload.reprioritized", audit_target(workload), actor=user, team=workload.group.slug,
                     before=old, after=priority, **({"fabric": fabric} if fabric else {}))  # fmt: skip
        kick_worker()
    return workload


def _reorder_in_fabric(workload: Workload, old: str, new: str) -> str:
    """Tell the fabric of a queued job (dispatched, not started) its new tier; what came of it in words, or ""
    when there was nothing to tell."""
    if workload.state != State.DISPATCHING or not workload.external_id or workload.fabric is None:
        return ""
    found = tiers.hints_of([old, new])
    hints = tiers.moving(found.get(old, fabric_base.TierHints()), found.get(new, fabric_base.TierHints()))
    name = workload.fabric.name
    try:
        told = fabric_base.reprioritise(connect(workload.fabric.to_config()), workload.external_id, hints)
    except fabric_base.FabricError as error:
        log.warning("workload %s: %s kept its own priority for job %s: %s", workload.pk, name, workload.external_id,
                    error)  # fmt: skip
        return f"{name} kept its own order: {error}"
    return f"reordered on {name} too" if told else ""


# --- Leases -------------------------------------------------------------------------------------------


class CannotExtend(Exception):
    """The lease cannot be extended now, or not where it runs; the message says why, in plain words."""


@dataclass(frozen=True)
class Extension:
    """A checked lease extension: the workload's new lease (which is also its runtime limit from now on),
    and, when it runs, the new end its fabric is told (None while it waits: it starts with the new lease)."""

    workload: Workload
    hours: Decimal
    lease_s: int
    ends_at: datetime | None


def _hours(seconds: float) -> str:
    """Seconds as hours in plain words: 3600 -> "1 hour", 5400 -> "1.5 hours"."""
    return words.hours(seconds)


def check_extend(user: Any, workload: Workload, hours: Decimal) -> Extension:
    """Check that this user may extend this notebook's or VM's lease by `hours`, and by how much in all.

    Raises PermissionDenied for someone who may not manage the workload, SubmitRejected (on "hours") for an
    extension that is no number of hours or goes past what the queue allows, and CannotExtend for a workload
    that is not pending or running, or runs on a fabric that cannot extend a lease.
    """
    if not access.can_manage(user, workload):
        raise PermissionDenied("Only the owner, a team lead or IT may extend this lease.")
    if workload.kind not in (WorkloadKind.NOTEBOOK, WorkloadKind.VM):
        raise SubmitRejected({"hours": ["Only notebooks and VMs have a lease."]})
    state = State(workload.state)
    if state in FINISHED:
        raise CannotExtend(f"It has already {state.label.lower()}; there is no lease left to extend.")
    if state in (State.ADMITTED, State.DISPATCHING):
        raise CannotExtend("It is starting on its fabric right now; extend it once it runs.")
    if state != State.PENDING and state != State.RUNNING:
        raise CannotExtend(f"It is {state.label.lower()}; only pending or running leases can be extended.")
    if not hours.is_finite() or not 0 < hours <= MAX_LEASE_HOURS or int(hours * 3600) < 1:
        raise SubmitRejected({"hours": [f"Give a number of hours more than 0 and at most {MAX_LEASE_HOURS}."]})
    current = workload.lease_s or workload.runtime_limit_s
    most = min(MAX_LEASE_HOURS * 3600, workload.queue.max_runtime_minutes * 60)
    lease_s = current + int(hours * 3600)
    if lease_s > most:
        room = f"it can grow by {_hours(most - current)} more" if most > current else "it already lasts that long"
        raise SubmitRejected(
            {"hours": [f"The queue {workload.queue.name} allows leases of at most {_hours(most)}: {room}."]}
        )
    ends_at = None
    if state == State.RUNNING:
        fabric = workload.fabric
        if fabric is None or not fabric_base.can_extend(fabric_class(fabric.kind), fabric.resolved_settings()):
            where = f"The fabric {fabric.name} ({fabric.kind})" if fabric is not None else "Its fabric"
            raise CannotExtend(f"{where} cannot extend a lease: this one ends as planned.")
        ends_at = (workload.started_at or timezone.now()) + timedelta(seconds=lease_s)
    return Extension(workload, hours, lease_s, ends_at)


def check_lease_to(user: Any, workload: Workload, lease_hours: Decimal) -> Decimal:
    """The hours to add for a lease of `lease_hours` in all (the API's PATCH): check_extend's checks, with
    the errors on `lease_hours`; a lease is only ever made longer."""
    more = lease_hours - Decimal(workload.lease_s or workload.runtime_limit_s) / 3600
    if more <= 0:
        now = f"it is {words.hours(workload.lease_s or workload.runtime_limit_s)} now"
        raise SubmitRejected({"lease_hours": [f"A lease can only be made longer: {now}."]})
    try:
        check_extend(user, workload, more)
    except SubmitRejected as rejected:  # it speaks of the hours added; this field is the total
        errors = dict(rejected.errors)
        raise SubmitRejected({"lease_hours": errors.pop("hours", [])} | errors) from rejected
    return more


class _Moved(Exception):
    """The workload changed between the check and the record."""


def do_extend(user: Any, extension: Extension) -> Workload:
    """Tell the fabric first (a running job), then record the new lease with an event and an audit record:
    a fabric that refuses leaves everything as it was. Raises CannotExtend when the fabric refuses, and
    _Moved when the workload changed meanwhile (extend() checks again)."""
    w, lease_s, ends_at = extension.workload, extension.lease_s, extension.ends_at
    if ends_at is not None and w.fabric is not None:
        try:
            fabric_base.extend(connect(w.fabric.to_config()), w.external_id, ends_at)
        except fabric_base.FabricError as error:
            raise CannotExtend(f"The fabric {w.fabric.name} could not extend it: {str(error).rstrip('.')}.") from error
    now = timezone.now()
    values: dict[str, Any] = {"lease_s": lease_s, "runtime_limit_s": lease_s, "updated_at": now}
    by = f"lease extended by {_hours(float(extension.hours) * 3600)}"
    if ends_at is not None:
        values["lease_ends_at"] = ends_at
        reason = f"{by}: it now ends at {ends_at:%Y-%m-%d %H:%M} UTC"
    else:
        reason = f"{by}, to {_hours(lease_s)} in all"
    with transaction.atomic():
        same = Workload.objects.filter(pk=w.pk, state=w.state, lease_s=w.lease_s, runtime_limit_s=w.runtime_limit_s)
        if same.update(**values) != 1:
            raise _Moved
        WorkloadEvent.objects.create(workload=w, at=now, actor=user, to_state=w.state, reason=reason[:500])
        audit.record("workload.lease_extended", audit_target(w), actor=user, team=w.group.slug,
                     hours=str(extension.hours),
                     before_s=w.lease_s or w.runtime_limit_s, after_s=lease_s, ends_at=ends_at)  # fmt: skip
    for key, value in values.items():
        setattr(w, key, value)
    log.info("workload %s: %s, by %s", w.pk, reason, user)
    return w


def extend(user: Any, workload: Workload, hours: Decimal) -> Workload:
    """Check and extend a lease (see check_extend for what it raises); checked again if the workload moves."""
    for _ in range(3):
        try:
            return do_extend(user, check_extend(user, workload, hours))
        except _Moved:
            workload.refresh_from_db()
    raise CannotExtend("It kept changing while you asked; look at it again and retry.")


# --- Idle notebooks (the worker's, see portal/worker/idle.py) -----------------------------------------


def do_warn_idle(workload: Workload, stop_at: datetime, reason: str) -> bool:
    """Record, once per idle spell, when a running idle notebook will be stopped; False if warned already."""
    return _warn_once(workload, "idle_stop_at", stop_at, reason)


def do_clear_idle(workload: Workload, reason: str) -> bool:
    """Take back the idle warning of a notebook used again (or no longer under an idle limit)."""
    return _clear_warning(workload, "idle_stop_at", reason)


def do_warn_gpu_idle(workload: Workload, now: datetime, reason: str) -> bool:
    """Record, once per idle spell, that the owner of running work whose GPUs sit idle was warned; False if
    warned already (or it no longer runs)."""
    return _warn_once(workload, "gpu_idle_warned_at", now, reason)


def do_clear_gpu_idle(workload: Workload, reason: str) -> bool:
    """Take back the GPU idle warning of work whose GPUs are busy again (or whose use is no longer known)."""
    return _clear_warning(workload, "gpu_idle_warned_at", reason)


def _warn_once(workload: Workload, field: str, value: datetime, reason: str) -> bool:
    """Set a warning's time on running work that has none yet, with an event saying why (compare-and-swap)."""
    with transaction.atomic():
        unset = {f"{field}__isnull": True}
        warned = Workload.objects.filter(pk=workload.pk, state=State.RUNNING, **unset).update(**{field: value})
        if warned:
            WorkloadEvent.objects.create(workload=workload, to_state=State.RUNNING, reason=reason[:500])
    if warned:
        setattr(workload, field, value)
    return bool(warned)


def _clear_warning(workload: Workload, field: str, reason: str) -> bool:
    """Take a warning back, as it was read (compare-and-swap), with an event while the work runs."""
    given = getattr(workload, field)
    if given is None:
        return False
    with transaction.atomic():
        cleared = Workload.objects.filter(pk=workload.pk, **{field: given}).update(**{field: None})
        if cleared and workload.state == State.RUNNING:
            WorkloadEvent.objects.create(workload=workload, to_state=State.RUNNING, reason=reason[:500])
    setattr(workload, field, None)
    return bool(cleared)


def kick_worker(need: str = wake.EVERYTHING) -> None:
    """Ask the worker to admit and dispatch once the current transaction commits (wake.kick: what `need` says)."""
    if settings.GRIDLANE_KICK_WORKER:
        wake.kick(need)
