"""The agent API under /api/v1/agent/: register, heartbeat, claim, status, log, usage, ends (many jobs' status
and last readings at once); and lease keys.

Every agent call carries a service token enrolled for one agent fabric; work of any other fabric
answers 404, as if it did not exist.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any
from uuid import UUID

from django.http import Http404
from django.shortcuts import get_object_or_404
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema
from rest_framework.decorators import api_view
from rest_framework.exceptions import PermissionDenied, ValidationError
from rest_framework.request import Request
from rest_framework.response import Response

from portal import access, known_fields
from portal.agents import fields, services
from portal.agents.models import AgentHost, Claim, LeaseKey
from portal.queues.models import Fabric

MAX_WAIT_S = 20.0
CLAIM_EVERY_S = 0.05
MAX_CLAIMS = 256  # claims one long poll may take at once


def _fabric(request: Request) -> Fabric:
    fabric = services.fabric_of(request.user)
    if fabric is None:
        raise PermissionDenied("This token does not belong to an agent of an agent fabric.")
    return fabric


def _body(request: Request, known: frozenset[str] | None = None) -> Mapping[str, Any]:
    """The JSON object sent; 400 for any other JSON (a list, a string, null) and, given the fields the endpoint
    takes (`known`), for a body naming any other field."""
    if not isinstance(request.data, Mapping):
        raise ValidationError({"detail": ["Send a JSON object."]})
    if known is not None:
        fields.refuse(request.data, known)
    return request.data


def _host(request: Request, fabric: Fabric) -> AgentHost:
    name = str(_body(request).get("host", ""))
    return get_object_or_404(AgentHost, fabric=fabric, name=name)


def _claim(fabric: Fabric, run_id: str) -> Claim:
    """The claim of this fabric with this run id; Http404 for any other, malformed ids included."""
    try:
        return Claim.objects.select_related("workload").get(fabric=fabric, run_id=UUID(run_id))
    except (Claim.DoesNotExist, ValueError) as error:
        raise Http404("No such run on this fabric.") from error


@extend_schema(request=OpenApiTypes.OBJECT, responses=OpenApiTypes.OBJECT)
@api_view(["POST"])
def register(request: Request) -> Response:
    fabric = _fabric(request)
    name = str(_body(request, fields.REGISTER).get("host", "")).strip()
    if not name or len(name) > 200:
        raise ValidationError({"host": ["Give the host's name (1-200 characters)."]})
    queues = _body(request).get("queues") or []
    if not isinstance(queues, list) or not all(isinstance(q, str) for q in queues):
        raise ValidationError({"queues": ["Give a list of queue slugs."]})
    try:
        host = services.register(fabric, name, dict(_body(request)))
    except (TypeError, ValueError):
        raise ValidationError({"detail": ["gpus, gpu_memory_mib, cpus and memory_mib are whole numbers."]}) from None
    return Response(
        {
            "host": host.name,
            "fabric": fabric.name,
            "heartbeat_s": services.heartbeat_s(fabric),
            "lost_after_s": services.lost_after_s(fabric),
        }
    )


@extend_schema(request=OpenApiTypes.OBJECT, responses=OpenApiTypes.OBJECT)
@api_view(["POST"])
def heartbeat(request: Request) -> Response:
    fabric = _fabric(request)
    _body(request, fields.HEARTBEAT)
    host = _host(request, fabric)
    if host.state == AgentHost.HostState.LOST:
        # Its work was given up on; it must register again before it gets more.
        return Response({"errors": {"host": ["This host was marked lost; register again."]}}, status=409)
    cancel = services.beat(host)
    leases = {
        str(c.run_id): c.lease_ends_at.isoformat()
        for c in Claim.objects.filter(host=host, state=Claim.ClaimState.RUNNING, lease_ends_at__isnull=False)
        if c.lease_ends_at is not None
    }
    return Response({"cancel": cancel, "leases": leases})


@extend_schema(request=OpenApiTypes.OBJECT, responses=OpenApiTypes.OBJECT)
@api_view(["POST"])
def claim(request: Request) -> Response:
    """Hold the request up to `wait` seconds (at most 20) and answer the moment work is claimable: 204 if none.

    With `max` (1-MAX_CLAIMS: the agent's free slots) the answer is `{"claims": [...]}`, up to that many taken
    at once; without it, one claim as the object itself (what agents before batching expect)."""
    fabric = _fabric(request)
    _body(request, fields.CLAIM)
    host = _host(request, fabric)
    if host.state == AgentHost.HostState.LOST:
        return Response({"errors": {"host": ["This host was marked lost; register again."]}}, status=409)
    queues = _body(request).get("queues") or host.queues
    if not isinstance(queues, list):
        raise ValidationError({"queues": ["Give a list of queue slugs."]})
    try:
        wait = min(MAX_WAIT_S, max(0.0, float(_body(request).get("wait", MAX_WAIT_S))))
    except (TypeError, ValueError):
        raise ValidationError({"wait": ["Give the seconds to wait as a number."]}) from None
    most = _body(request).get("max")
    if most is not None and (type(most) is not int or not 1 <= most <= MAX_CLAIMS):
        raise ValidationError({"max": [f"Give a whole number of claims from 1 to {MAX_CLAIMS}."]})
    deadline = time.monotonic() + wait
    while True:
        got = services.try_claim_many(host, [str(q) for q in queues], most or 1)
        if got:
            if most is None:
                return Response(services.claim_payload(got[0]))
            return Response({"claims": [services.claim_payload(c) for c in got]})
        if time.monotonic() >= deadline:
            return Response(status=204)
        time.sleep(CLAIM_EVERY_S)
        if services.host_lost(host):
            # Given up while it waited (its heartbeats stopped, its instance was reclaimed): no point holding on.
            return Response({"errors": {"host": ["This host was marked lost; register again."]}}, status=409)


@extend_schema(request=OpenApiTypes.OBJECT, responses=OpenApiTypes.OBJECT)
@api_view(["POST"])
def status(request: Request, run_id: str) -> Response:
    fabric = _fabric(request)
    c = _claim(fabric, run_id)
    state = str(_body(request, fields.STATUS).get("state", ""))
    if state not in services.FINISHED_STATES:
        raise ValidationError({"state": [f"Choose one of: {', '.join(sorted(services.FINISHED_STATES))}."]})
    exit_code = _body(request).get("exit_code")
    if exit_code is not None and (type(exit_code) is not int or not -(2**31) <= exit_code < 2**31):
        raise ValidationError({"exit_code": ["Give an integer or null."]})
    services.report(c, state, exit_code, str(_body(request).get("reason", "")))
    return Response({"ok": True})


MAX_ENDS = 1000  # jobs' ends one request may report


@extend_schema(request=OpenApiTypes.OBJECT, responses=OpenApiTypes.OBJECT)
@api_view(["POST"])
def ends(request: Request) -> Response:
    """How many jobs ended, at once: `{"runs": [{"run_id", "state", "exit_code", "reason", "samples"}]}`, each as
    its status (and, with samples, its usage) would say. Every item is checked first; a bad one answers 400 with
    its index and nothing is recorded. Runs this fabric does not know (or another fabric's) are answered in
    `unknown` and left alone."""
    fabric = _fabric(request)
    runs = _body(request, fields.ENDS).get("runs")
    if not isinstance(runs, list) or not 1 <= len(runs) <= MAX_ENDS:
        raise ValidationError({"runs": [f"Give a list of 1 to {MAX_ENDS} runs."]})
    checked: list[tuple[UUID, str, int | None, str, list[dict[str, Any]]]] = []
    errors: dict[str, dict[str, Any]] = {}
    for index, run in enumerate(runs):
        found = _end_errors(run)
        if found:
            errors[str(index)] = found
            continue
        samples = run.get("samples") or []
        checked.append((UUID(str(run["run_id"])), run["state"], run.get("exit_code"), str(run.get("reason", "")),
                        samples))  # fmt: skip
    if errors:
        raise ValidationError({"runs": errors})
    claims = {c.run_id: c for c in Claim.objects.filter(fabric=fabric, run_id__in=[c[0] for c in checked])}
    try:
        services.report_many([(claims[r], state, code, reason, samples)
                              for r, state, code, reason, samples in checked if r in claims])  # fmt: skip
    except (TypeError, ValueError) as error:  # a reading that is not one: nothing was recorded
        raise ValidationError({"runs": [f"A reading is not one: {error}"]}) from error
    return Response({"recorded": sum(r in claims for r, *_ in checked),
                     "unknown": sorted(str(r) for r, *_ in checked if r not in claims)})  # fmt: skip


def _end_errors(run: Any) -> dict[str, Any]:
    """What is wrong with one item of `ends`, by field; {} when nothing is."""
    if not isinstance(run, Mapping):
        return {"run": ["Give an object."]}
    errors: dict[str, Any] = dict(known_fields.unknown_errors(run, fields.END))
    unknown_in_samples = fields.item_errors(run.get("samples"), fields.SAMPLE)
    if unknown_in_samples:
        errors["samples"] = unknown_in_samples
    try:
        UUID(str(run.get("run_id", "")))
    except ValueError:
        errors["run_id"] = ["Give the run's id."]
    if run.get("state") not in services.FINISHED_STATES:
        errors["state"] = [f"Choose one of: {', '.join(sorted(services.FINISHED_STATES))}."]
    exit_code = run.get("exit_code")
    if exit_code is not None and (type(exit_code) is not int or not -(2**31) <= exit_code < 2**31):
        errors["exit_code"] = ["Give an integer or null."]
    if not isinstance(run.get("reason", ""), str):
        errors["reason"] = ["Give text."]
    samples = run.get("samples") or []
    if not isinstance(samples, list) or not all(isinstance(s, dict) for s in samples):
        errors["samples"] = ["Give a list of samples."]
    return errors


@extend_schema(request=OpenApiTypes.OBJECT, responses=OpenApiTypes.OBJECT)
@api_view(["POST"])
def log(request: Request, run_id: str) -> Response:
    fabric = _fabric(request)
    c = _claim(fabric, run_id)
    chunk = _body(request, fields.LOG).get("chunk", "")
    if not isinstance(chunk, str):
        raise ValidationError({"chunk": ["Give the text to append."]})
    services.append_log(c, chunk)
    c.refresh_from_db(fields=["cancel_requested"])
    return Response({"cancel": c.cancel_requested})


@extend_schema(request=OpenApiTypes.OBJECT, responses=OpenApiTypes.OBJECT)
@api_view(["POST"])
def usage(request: Request, run_id: str) -> Response:
    fabric = _fabric(request)
    c = _claim(fabric, run_id)
    fields.refuse(_body(request), fields.USAGE, {"samples": fields.SAMPLE})
    samples = _body(request).get("samples", [])
    if not isinstance(samples, list) or not all(isinstance(s, dict) for s in samples):
        raise ValidationError({"samples": ["Give a list of samples."]})
    try:
        count = services.record_usage(c, samples)
    except (TypeError, ValueError) as error:
        raise ValidationError({"samples": [str(error)]}) from error
    return Response({"recorded": count})


@extend_schema(request=OpenApiTypes.OBJECT, responses=OpenApiTypes.OBJECT)
@api_view(["PUT"])
def lease_key(request: Request, workload_id: str) -> Response:
    """The owner (or whoever may manage it) sets the SSH public key a VM lease lets in."""
    workload = access.access_workload(request.user, workload_id)
    if not access.can_manage(request.user, workload):
        raise PermissionDenied("Only the owner, a team lead or IT may set the lease's key.")
    if workload.kind != "vm":
        raise ValidationError({"public_key": ["Only VM leases take an SSH key."]})
    key = str(_body(request, fields.LEASE_KEY).get("public_key", "")).strip()
    parts = key.split()
    if len(parts) < 2 or not parts[0].startswith(("ssh-", "ecdsa-", "sk-")) or "\n" in key or len(key) > 8000:
        raise ValidationError({"public_key": ["Give one OpenSSH public key line."]})
    from_addresses = str(_body(request).get("from", "")).strip()
    if from_addresses and not all(c.isalnum() or c in ".:/,*?-" for c in from_addresses):
        raise ValidationError({"from": ["Give addresses or patterns separated by commas."]})
    LeaseKey.objects.update_or_create(
        workload=workload, defaults={"public_key": " ".join(parts[:3]), "from_addresses": from_addresses}
    )
    return Response({"workload": str(workload.pk), "public_key": " ".join(parts[:3]), "from": from_addresses})
