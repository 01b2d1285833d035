"""A user's own sbatch/qsub script at submit time: its directives become the workload's request.

Plain functions over what the submit already loaded (the queue with its targets and fabrics), so
policy (limits, reservations, fair share, gang, backfill) applies to what the script asks for.
The script itself is never changed: what the queue forces goes on the submitter's command line
at dispatch (fabrics.slurm.native).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from django.db.models import Q

from fabrics import native
from fabrics.base import Resources
from fabrics.kubernetes import manifest
from fabrics.slurm.directives import DirectiveError, Directives
from portal import access, words
from portal.queues.models import Queue, QueueTarget

KIND_WORDS = {"slurm": "sbatch", "pbs": "qsub", "": "batch", "kubernetes": "Kubernetes"}
RESOURCE_FIELDS = ("gpus", "cpus", "memory_gb", "nodes")


@dataclass(frozen=True)
class Native:
    """What a script asks for, as the workload records it."""

    kind: str  # slurm | pbs
    read: Directives
    per_node: Resources
    nodes: int
    runtime_s: int | None  # None: the script sets no limit (the queue's default applies)
    max_array: int = native.MAX_ARRAY  # the most elements an array may have on this queue


def targets_of(queue: Queue, kind: str) -> list[QueueTarget]:
    """The queue's enabled targets that can take a script of this kind ("slurm", "pbs"; "": a plain script): a
    Slurm or PBS fabric's, or a local fabric's that IT lets run scripts."""
    return [t for t in queue.targets.all() if t.takes_scripts(kind)]


def fabric_kind(dialect: str, targets: list[QueueTarget]) -> str:
    """The kind of fabric that runs a script of this dialect among these targets (which take it): the script's
    own scheduler where the queue has one, else the first target's (a local fabric, or a plain script's)."""
    kinds = [t.fabric.kind for t in targets]
    return dialect if dialect in kinds else kinds[0]


def queues_taking(user: Any, kind: str, work: str) -> list[str]:
    """Names of the queues this user may use that take scripts of this kind as this kind of work (for an error
    message)."""
    kinds = native.RUN_BY.get(kind, (kind,))  # "kubernetes": manifests
    # Local targets take scripts only where IT says so (in the same join as the kind: one target both).
    takes = Q(targets__fabric__kind__in=[k for k in kinds if k != "local"]) | Q(
        targets__fabric__kind="local", targets__runs_scripts=True
    )
    # The kinds of work are a JSON list: read in Python, as every database (SQLite included) can give them.
    found = (
        access.usable_queues(user)
        .filter(takes if "local" in kinds else Q(targets__fabric__kind__in=kinds), targets__fabric__enabled=True)
        .distinct()
        .order_by("name")
        .values_list("name", "kinds")
    )
    return [name for name, works in found if isinstance(works, list) and work in works][:10]


def check(
    user: Any, queue: Queue, script: str, given: dict[str, Any], errors: dict[str, list[str]], work: str = "batch"
) -> Native | None:
    """Read the script for this queue; add to `errors` (on "script", naming the line, or on the resource given
    that disagrees) and return None when it cannot run here as written."""

    def err(field: str, message: str) -> None:
        errors.setdefault(field, []).append(message)

    kind = native.script_kind(script)
    targets = targets_of(queue, kind)
    if not targets:
        others = queues_taking(user, kind, work)
        where = f"queues that take them: {', '.join(others)}" if others else "no queue you may use takes them"
        err("script", f"The queue {queue.name} runs no {KIND_WORDS[kind]} scripts; {where}.")
        return None
    kind = fabric_kind(kind, targets)  # local: an sbatch script as one host runs it (fabrics/local/scripts.py)
    targets = [t for t in targets if t.fabric.kind == kind]
    try:
        read = native.read(kind, script)
    except DirectiveError as error:
        err("script", str(error))
        return None
    if kind == "pbs" and read.array:
        line = read.given("array")
        err("script", f'line {line.line if line else 1}: Gridlane runs PBS arrays as its own; give "array" instead.')
        return None
    per_node: Resources | None = None
    most = native.MAX_ARRAY
    for target in targets:
        try:
            policy = native.Policy.of(kind, target.native, target.directives_allowed or ())
            policy.check(read)
            per_node = policy.per_node(read)
        except DirectiveError as error:
            err("script", f"{error} (the queue {queue.name})")
            return None
        except ValueError as error:
            err("script", f"{error}.")
            return None
        most = min(most, policy.max_array)
    if per_node is None:
        return None  # there is always a target here
    result = Native(kind, read, per_node, read.nodes, read.time_s, most)
    _agrees(result, given, err)
    return result


def _agrees(n: Native, given: dict[str, Any], err: Any) -> None:
    """Resources given beside a script must be what the script asks for."""
    said = {
        "gpus": Decimal(n.per_node.gpus_milli) / 1000,
        "cpus": Decimal(n.per_node.cpus_milli) / 1000,
        "memory_gb": Decimal(n.per_node.memory_mib) / 1024,
        "nodes": Decimal(n.nodes),
    }
    for key in RESOURCE_FIELDS:
        if key in given and Decimal(given[key]) != said[key]:
            err(
                f"resources.{key}",
                f"The script asks for {said[key].normalize():f} (per node); leave it out or give the same.",
            )
    minutes = given.get("runtime_limit_minutes")
    if minutes is not None and n.runtime_s is not None and minutes * 60 != n.runtime_s:
        err("runtime_limit_minutes", f"The script asks for {n.runtime_s // 60} minutes; leave it out or give the same.")


def check_array(
    req_array: str, n: Native | None, queue: Queue, errors: dict[str, list[str]]
) -> tuple[str, list[int], int]:
    """The array spec (from the request or the script's --array / -J), its indexes and % limit; ("", [], 0)
    for no array. Errors go on "array" or, for the script's own line, on "script"."""
    from_script = n.read.array if n is not None else ""
    spec = req_array or from_script
    if not spec:
        return "", [], 0
    if req_array and from_script and req_array != from_script:
        line = n.read.given("array") if n is not None else None
        at = f" (line {line.line})" if line else ""
        errors.setdefault("array", []).append(f"The script asks for {from_script}{at}; leave it out or give the same.")
        return "", [], 0
    most = n.max_array if n is not None else native.MAX_ARRAY
    try:
        indexes, throttle = native.array_indexes(spec, most)
    except ValueError as error:
        if req_array:
            errors.setdefault("array", []).append(f"{str(error).rstrip('.')} (the queue {queue.name}).")
        else:
            errors.setdefault("script", []).append(f"{_line(n, 'array')}{error} (the queue {queue.name}).")  # type: ignore[arg-type]
        return "", [], 0
    return spec, indexes, throttle


def name_of(n: Native) -> str:
    """A workload name from the script's job name (Gridlane's name rules), or "batch-script"."""
    name = re.sub(r"[^A-Za-z0-9._ -]", "-", n.read.job_name).strip(" .-_")[:100]
    return name or "batch-script"


def _line(n: Native, *options: str) -> str:
    found = [d for d in (n.read.given(o) for o in options) if d is not None]
    return f"line {found[0].line}: " if found else ""


def field_of(n: Native) -> str:
    """Where errors about it go: "manifest" for a Kubernetes Job, else "script"."""
    return "manifest" if n.kind == "kubernetes" else "script"


def check_limits(n: Native, queue: Queue, errors: dict[str, list[str]], gpus: int, cpus: int, nodes: int) -> None:
    """The per-node maxima every request has, said of the script's lines."""
    field = field_of(n)
    if n.per_node.gpus_milli > gpus * 1000:
        at = _line(n, "gpus-per-node", "gres", "gpus-per-task", "gpus", "resource")
        errors.setdefault(field, []).append(f"{at}at most {words.gpus(gpus)} per node.")
    if n.per_node.cpus_milli > cpus * 1000:
        at = _line(n, "cpus-per-task", "ntasks-per-node", "ntasks", "resource")
        errors.setdefault(field, []).append(f"{at}at most {cpus} CPUs per node.")
    if n.nodes > nodes:
        errors.setdefault(field, []).append(f"{_line(n, 'nodes', 'resource')}at most {nodes} nodes.")


def time_error(n: Native | None, queue: Queue) -> str:
    """The message for a script whose time limit the queue does not allow; "" when the script sets none."""
    if n is None or not n.runtime_s:
        return ""
    at = _line(n, "time", "resource")
    most = queue.max_runtime_minutes
    return f"{at}the queue {queue.name} allows 1 to {most} minutes, the script asks for {n.runtime_s / 60:g}."


def check_manifest(
    user: Any, queue: Queue, text: str, given: dict[str, Any], errors: dict[str, list[str]], work: str = "batch"
) -> Native | None:
    """Read a Kubernetes Job manifest for this queue: its request, or errors on "manifest" naming the field."""
    targets = [t for t in queue.targets.all() if t.fabric.enabled and t.fabric.kind == "kubernetes"]
    if not targets:
        others = queues_taking(user, "kubernetes", work)
        where = f"queues that take them: {', '.join(others)}" if others else "no queue you may use takes them"
        errors.setdefault("manifest", []).append(f"The queue {queue.name} runs no Kubernetes Jobs; {where}.")
        return None
    for target in targets:
        try:
            settings = target.fabric.resolved_settings()
            held = manifest.target_policy(target.template, settings)  # the target's exceptions (policy.py)
            read = manifest.read(text, str(settings.get("namespace") or ""), held)
        except manifest.ManifestError as error:
            errors.setdefault("manifest", []).append(f"{error}.")
            return None
    result = Native("kubernetes", Directives(job_name=read.name), read.per_pod, read.pods, read.deadline_s)
    _agrees(result, given, lambda field, message: errors.setdefault(field, []).append(message))
    return result
