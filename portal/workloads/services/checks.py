"""The checks of one submission, each a small named function over a `Draft`, run in the order of `CHECKS`.

Adding a check is one function here and one line in CHECKS: it reads the request, the context and what earlier
checks worked out (the team, the script, the array, the code), and records each refusal on its field with
`draft.err(field, message)`. Every check runs, so that a refusal lists every field error at once; a check that
needs an earlier check's value skips when that value is missing (its field has an error already). Once all
pass, `build` makes the unsaved workload and `fits.check_fits_somewhere` refuses what no fabric could ever hold.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from portal import access, sql, words
from portal.queues import tiers
from portal.queues.models import WorkloadKind
from portal.workloads import code_rules as code_travel
from portal.workloads import gpu_types, limits, native
from portal.workloads.models import Workload
from portal.workloads.services.entitlement import SubmitContext, submit_context
from portal.workloads.services.errors import SubmitRejected
from portal.workloads.services.fits import check_fits_somewhere
from portal.workloads.services.request import (
    IMAGE_RE,
    KINDS,
    LEASED_KINDS,
    MAX_COMMAND_BYTES,
    MAX_CPUS_PER_NODE,
    MAX_GPUS_PER_NODE,
    MAX_LEASE_HOURS,
    MAX_MEMORY_GB_PER_NODE,
    MAX_NODES,
    NAME_RE,
    SubmitRequest,
    milli,
    text_errors,
)


@dataclass
class Draft:
    """One submission being checked: the request, who sends it and the context it was read with, every field
    error found so far, and what the checks worked out on the way (None while not worked out, or refused)."""

    user: Any
    req: SubmitRequest
    ctx: SubmitContext
    errors: dict[str, list[str]] = field(default_factory=dict)
    group: Any = None  # the team it is for
    script: native.Native | None = None  # what its batch script or Job manifest asks for
    array: str = ""
    indexes: Sequence[int] = ()
    throttle: int | None = None
    name: str = ""
    code: dict[str, str] = field(default_factory=dict)
    gpus_milli: int | None = None
    cpus_milli: int | None = None
    runtime_s: int = 0
    lease_s: int | None = None

    def err(self, name: str, message: str) -> None:
        self.errors.setdefault(name, []).append(message)


def check_team(d: Draft) -> None:
    """The team it is for: the one named, or the user's only team for the queue."""
    groups, queue = d.ctx.groups, d.ctx.queue
    if d.req.group is not None:
        d.group = next((g for g in groups if g.slug == d.req.group), None)
        if d.group is None:
            d.err("group", f"You cannot submit to {queue.name} as team {d.req.group!r}.")
    elif len(groups) == 1:
        d.group = groups[0]
    else:
        names = ", ".join(g.slug for g in groups) or "none"
        d.err("group", f"Say which team this is for (one of: {names}).")


def check_kind(d: Draft) -> None:
    """A kind of work the queue takes."""
    kind, queue = d.req.kind, d.ctx.queue
    if kind not in KINDS:
        d.err("kind", f"Choose one of: {', '.join(KINDS)}.")
    elif kind not in queue.kinds:
        kinds = ", ".join(words.kind_label(k).lower() for k in queue.kinds)
        d.err("kind", f"The queue {queue.name} takes {kinds} work, not {words.kind_label(kind).lower()}.")


def check_script(d: Draft) -> None:
    """A batch script or Job manifest: batch work only, and what it asks for read from it (fabric rules)."""
    req = d.req
    given = {k: getattr(req, k) for k in req.resources_given} | {"runtime_limit_minutes": req.runtime_limit_minutes}
    if (req.script or req.manifest) and req.kind in LEASED_KINDS:
        d.err("kind", f"A batch script or a Job manifest runs as training or batch work, not as a {req.kind}.")
    if req.script and not text_errors(req.script, "script", MAX_COMMAND_BYTES):
        d.script = native.check(d.user, d.ctx.queue, req.script, given, d.errors, req.kind)
    elif req.manifest and not req.script and not text_errors(req.manifest, "manifest", MAX_COMMAND_BYTES):
        d.script = native.check_manifest(d.user, d.ctx.queue, req.manifest, given, d.errors, req.kind)


def check_array(d: Draft) -> None:
    """An array's indexes and throttle (from the request, or the script's own directive)."""
    array, indexes, throttle = native.check_array(d.req.array, d.script, d.ctx.queue, d.errors)
    d.array, d.indexes, d.throttle = array, indexes, throttle or None
    if array and d.req.kind in LEASED_KINDS:
        d.err("array", "Arrays are training or batch work.")


def check_name_and_command(d: Draft) -> None:
    """The name (given, or the script's own) and what it runs, as text."""
    d.name = d.req.name or (native.name_of(d.script) if d.script is not None else "")
    for name, messages in name_and_command_errors(d.req, d.name).items():
        for message in messages:
            d.err(name, message)


def check_image(d: Draft) -> None:
    if d.req.image and not IMAGE_RE.fullmatch(d.req.image):
        d.err("image", "That is not a container image reference.")


def check_code(d: Draft) -> None:
    """Code and requirements that travel with a command, from a bundle the team owns."""
    req = d.req
    d.code = code_travel.check(req.code, req.requirements, d.errors)
    if d.code or req.requirements:
        if req.script or req.manifest:
            d.err("code", "Code and requirements travel with a command; a batch script or Job manifest brings its own.")
        elif req.kind == WorkloadKind.VM:
            d.err("code", "A VM lease runs no command for code to travel with.")
    if d.code and d.group is not None:
        code_travel.check_owned(d.code, d.group, d.errors)


def check_resources(d: Draft) -> None:
    """GPUs, CPUs, memory and nodes per node within the site's bounds, in steps a fabric can give."""
    req = d.req
    d.gpus_milli = milli(req.gpus)
    if req.gpus < 0 or req.gpus > MAX_GPUS_PER_NODE:
        d.err("resources.gpus", f"Ask for 0 to {MAX_GPUS_PER_NODE} GPUs per node.")
    elif d.gpus_milli is None or (req.gpus > 1 and req.gpus != req.gpus.to_integral_value()):
        d.err("resources.gpus", "Fractions of a GPU go below one (e.g. 0.25); above one, ask for whole GPUs.")
    d.cpus_milli = milli(req.cpus)
    if req.cpus <= 0 or req.cpus > MAX_CPUS_PER_NODE or d.cpus_milli is None:
        d.err(
            "resources.cpus", f"Ask for more than 0 and at most {MAX_CPUS_PER_NODE} CPUs per node, in steps of 0.001."
        )
    if req.memory_gb <= 0 or req.memory_gb > MAX_MEMORY_GB_PER_NODE:
        d.err("resources.memory_gb", f"Ask for more than 0 and at most {MAX_MEMORY_GB_PER_NODE} GB per node.")
    if not 1 <= req.nodes <= MAX_NODES:
        d.err("resources.nodes", f"Ask for 1 to {MAX_NODES} nodes.")


def check_runtime(d: Draft) -> None:
    """A runtime limit of 1 minute to the queue's most: given, the script's own, or the queue's default (None
    takes the default; 0 is refused, not quietly made the default). A script's resources within the bounds."""
    req, queue, script = d.req, d.ctx.queue, d.script
    runtime = queue.default_runtime_minutes if req.runtime_limit_minutes is None else req.runtime_limit_minutes
    d.runtime_s = runtime * 60
    if script is not None:
        d.runtime_s = script.runtime_s or d.runtime_s
        native.check_limits(script, queue, d.errors, MAX_GPUS_PER_NODE, MAX_CPUS_PER_NODE, MAX_NODES)
    most_s = queue.max_runtime_minutes * 60
    if not 60 <= d.runtime_s <= most_s:
        d.err(
            native.field_of(script) if script is not None and script.runtime_s else "runtime_limit_minutes",
            native.time_error(script, queue)
            or f"The queue {queue.name} allows runtimes of 1 minute to {words.duration(most_s)}.",
        )


def check_priority(d: Draft) -> None:
    """A priority tier the team may use (the tiers came with the team: tiers.columns)."""
    if d.group is None:
        return
    may_lead = d.group.pk in d.ctx.leads or access.is_it(d.user)
    refused = tiers.check(d.req.priority, tiers.of_team(d.group), d.group.slug, may_lead)
    if refused:
        d.err("priority", refused)


def check_lease(d: Draft) -> None:
    """A lease only for notebooks and VMs, of more than 0 and at most MAX_LEASE_HOURS."""
    hours = d.req.lease_hours
    if hours is None:
        return
    if d.req.kind not in LEASED_KINDS:
        d.err("lease_hours", "Only notebooks and VMs have a lease.")
    elif not 0 < hours <= MAX_LEASE_HOURS:
        d.err("lease_hours", f"A lease lasts more than 0 and at most {MAX_LEASE_HOURS} hours.")
    else:
        d.lease_s = int(hours * 3600)


def check_gpu_type(d: Draft) -> None:
    """A GPU type, where one is named, that some target of the queue has (portal.workloads.gpu_types)."""
    refused = gpu_types.check(d.ctx.queue, d.req.gpu_type) if d.req.gpu_type else ""
    if refused:
        d.err("gpu_type", refused)


# Every check of a submission, in the order their messages are listed.
CHECKS: tuple[Callable[[Draft], None], ...] = (
    check_team,
    check_kind,
    check_script,
    check_array,
    check_name_and_command,
    check_image,
    check_code,
    check_resources,
    check_runtime,
    check_priority,
    check_gpu_type,
    check_lease,
)


def check_submit(
    user: Any, req: SubmitRequest, known: SubmitContext | None = None, generation: int | None = None
) -> Workload:
    """Validate a submission for this user and return the unsaved workload.

    Raises SubmitRejected with every field error at once, or QueueForbidden when the user
    may not use the queue. `known` is what submit_context(user, req.queue) returned, when the caller
    has it already (a bulk submit reads it once per queue); else it is read, under `generation` where given.
    """
    draft = Draft(user, req, known or submit_context(user, req.queue, generation))
    for check in CHECKS:
        check(draft)
    if draft.errors or draft.group is None or draft.gpus_milli is None or draft.cpus_milli is None:
        raise SubmitRejected(draft.errors)  # the last three are None only alongside an error
    workload = build(draft)
    group, ctx = draft.group, draft.ctx
    check_fits_somewhere(workload, ctx.queue, lambda fabric: limits.cap_read(group, fabric.pk), ctx.fits)
    return workload


def build(d: Draft) -> Workload:
    """The unsaved workload of a draft that passed every check: its resources are the script's where it has one."""
    req, script = d.req, d.script
    gpus_milli, cpus_milli = d.gpus_milli, d.cpus_milli
    memory_mib, nodes = int((req.memory_gb * 1024).to_integral_value()), req.nodes
    if script is not None:
        per_node = script.per_node
        gpus_milli, cpus_milli, memory_mib, nodes = (
            per_node.gpus_milli,
            per_node.cpus_milli,
            per_node.memory_mib,
            script.nodes,
        )
    return sql.unsaved(
        Workload,
        owner=d.user,
        group=d.group,
        queue=d.ctx.queue,
        kind=req.kind,
        name=d.name,
        command=req.command,
        script=req.script or req.manifest,
        native_kind=script.kind if script is not None else "",
        image=req.image,
        code=d.code,
        requirements=req.requirements,
        gpu_type=req.gpu_type,
        gpus_milli=gpus_milli,
        cpus_milli=cpus_milli,
        memory_mib=memory_mib,
        nodes=nodes,
        runtime_limit_s=d.runtime_s,
        priority=req.priority,
        lease_s=d.lease_s,
        array=d.array,
        array_size=len(d.indexes),
        array_throttle=d.throttle,
    )


def name_and_command_errors(req: SubmitRequest, name: str) -> dict[str, list[str]]:
    """The checks of a submission's name and of what it runs (command, script or manifest) as text: the part of
    check_submit that differs between the items of a bulk submit of one shape (see bulk.check_by_shape)."""
    errors: dict[str, list[str]] = {}
    if not NAME_RE.fullmatch(name):
        errors["name"] = ["Use 1-100 letters, digits, spaces, '.', '_' or '-', starting with a letter or digit."]
    if sum(map(bool, (req.command, req.script, req.manifest))) > 1:
        errors["command"] = ["Give one of a command, a script or a manifest."]
    elif not (req.command.strip() or req.script.strip() or req.manifest.strip()) and req.kind not in LEASED_KINDS:
        # Only spaces would "succeed" at once, having run nothing.
        errors["command"] = [
            "Give the command to run." if not req.command else "The command is only spaces: give one to run."
        ]
    for text_field, value in (("command", req.command), ("script", req.script), ("manifest", req.manifest)):
        for message in text_errors(value, text_field, MAX_COMMAND_BYTES):
            errors.setdefault(text_field, []).append(message)
    return errors
