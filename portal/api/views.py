"""REST API v1: thin views over `portal.access` (who may see what) and the workload services."""

from __future__ import annotations

from typing import Any
from uuid import UUID

from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.db.models import QuerySet
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers, status, viewsets
from rest_framework.authentication import BaseAuthentication
from rest_framework.decorators import action
from rest_framework.exceptions import AuthenticationFailed, PermissionDenied, ValidationError
from rest_framework.pagination import LimitOffsetPagination
from rest_framework.request import Request
from rest_framework.response import Response

from portal import access
from portal.accounts import ratelimit, scopes
from portal.api import auth, single_submit
from portal.api.dry_run import BulkDryRunOut, DryRunOut, rendered
from portal.api.serializers import (
    BulkIn,
    BulkOut,
    QueueOut,
    WorkloadDetailOut,
    WorkloadIn,
    WorkloadOut,
    element_counts,
)
from portal.known_fields import KnownFieldsOnly, refuse_unknown
from portal.worker import dryrun
from portal.workloads import services
from portal.workloads.models import Workload
from portal.workloads.states import State
from portal.workloads.stats import queue_figures

KEPT_TOKEN = frozenset({"create", "dry_run"})  # the actions whose token this process keeps a moment (auth.kept)

# Every error answer: {"errors": {"field": ["message", ...]}} (see portal.api.errors).
MESSAGES = {"type": "array", "items": {"type": "string"}}
ERRORS = {"type": "object", "properties": {"errors": {"type": "object", "additionalProperties": MESSAGES}}}
# A bulk submit's bad items, by index: {"errors": {"items": {"3": {"name": ["..."]}}}}.
ITEM_ERRORS = {"type": "object", "additionalProperties": {"type": "object", "additionalProperties": MESSAGES}}
BULK_ERRORS = {"type": "object", "properties": {"errors": {"type": "object", "properties": {"items": ITEM_ERRORS}}}}


class QueueViewSet(viewsets.ViewSet):
    @extend_schema(responses=QueueOut(many=True))
    def list(self, request: Request) -> Response:
        """The queues the caller may use, with their backlog, running count, p95 wait and how good their estimated
        starts were."""
        queues = access.usable_queues(request.user)
        if (only := scopes.queues_of(request.auth)) is not None:  # a token limited to some queues
            queues = queues.filter(slug__in=only)
        figures = queue_figures(queues)
        rows = [
            {
                "slug": f.queue.slug,
                "name": f.queue.name,
                "description": f.queue.description,
                "kinds": f.queue.kinds,
                "default_runtime_minutes": f.queue.default_runtime_minutes,
                "max_runtime_minutes": f.queue.max_runtime_minutes,
                "backlog": f.backlog,
                "running": f.running,
                "p95_wait_seconds": f.p95_wait_seconds,
                "estimates": f.estimates.as_dict() if f.estimates is not None else None,
            }
            for f in figures
        ]
        return Response(QueueOut(rows, many=True).data)


FILTERS = [
    OpenApiParameter("state", str, description="e.g. pending, running, succeeded"),
    OpenApiParameter("queue", str, description="queue slug"),
    OpenApiParameter("kind", str),
    OpenApiParameter("group", str, description="team slug"),
    OpenApiParameter("mine", bool, description="only the caller's own workloads"),
    OpenApiParameter("array", str, description="an array's id: its elements (else arrays are listed as their parent)"),
]


class PatchIn(KnownFieldsOnly, serializers.Serializer[Any]):
    priority = serializers.CharField(
        max_length=20, required=False, help_text="A priority tier the workload's team may use (IT defines them)."
    )
    lease_hours = serializers.DecimalField(
        max_digits=9, decimal_places=3, required=False,
        help_text="A notebook's or VM's lease, in hours from its start: only ever longer than it is.",
    )  # fmt: skip

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if not attrs:
            raise serializers.ValidationError("Send priority, lease_hours or both.")
        return attrs


class ExtendIn(KnownFieldsOnly, serializers.Serializer[Any]):
    hours = serializers.DecimalField(max_digits=9, decimal_places=3, help_text="How many hours to add to the lease.")


class Pagination(LimitOffsetPagination):
    max_limit = 1000  # a client's ?limit= goes into SQL's LIMIT: unbounded, a huge one is a database error


class WorkloadViewSet(viewsets.GenericViewSet[Workload]):
    lookup_value_regex = "[0-9a-fA-F-]{32,36}"
    pagination_class = Pagination

    def get_queryset(self) -> QuerySet[Workload]:
        workloads = (
            access.visible_workloads(self.request.user)
            .select_related("queue", "group", "owner", "fabric")
            .defer("log_tail", "rendered")
        )
        if (only := scopes.queues_of(self.request.auth)) is not None:  # a token limited to some queues
            workloads = workloads.filter(queue__slug__in=only)
        return workloads

    def _workload(self, pk: str, action: str) -> Workload:
        """The workload the caller may see, when its token may take `action` on its queue (else 403)."""
        workload = access.access_workload(self.request.user, pk)
        scopes.check_queue(self.request.auth, workload.queue.slug, action)
        return workload

    def get_authenticators(self) -> list[BaseAuthentication]:
        """The single submit and the dry run take their token from what this process keeps (auth.kept)."""
        authenticators = super().get_authenticators()
        request = getattr(self, "request", None)
        if request is None or getattr(self, "action_map", {}).get(request.method.lower()) not in KEPT_TOKEN:
            return authenticators
        return [
            auth.BearerTokenAuthentication(keep=True) if type(a) is auth.BearerTokenAuthentication else a
            for a in authenticators
        ]

    def handle_exception(self, exc: Exception) -> Response:
        """Whatever a request on a token kept unconfirmed fails with, it hears only after the token is looked up
        again: 401 when it may no longer be used (auth.kept)."""
        if auth.unconfirmed(self.request) is not None and not isinstance(exc, AuthenticationFailed):
            try:
                auth.confirm(self.request)
            except AuthenticationFailed as failed:
                exc = failed
        return super().handle_exception(exc)

    def get_serializer_class(self) -> type[Any]:
        return {"create": WorkloadIn, "retrieve": WorkloadDetailOut}.get(self.action, WorkloadOut)

    @extend_schema(parameters=FILTERS, responses=WorkloadOut(many=True))
    def list(self, request: Request) -> Response:
        workloads = self.get_queryset()
        params = request.query_params
        if any("\x00" in params.get(name, "") for name in ("queue", "kind", "group")):
            workloads = workloads.none()  # no slug holds a NUL (and PostgreSQL refuses one in a query): nothing matches
        if state := params.get("state"):
            if state not in State.values:
                raise ValidationError({"state": [f"Choose one of: {', '.join(State.values)}."]})
            workloads = workloads.filter(state=state)
        if queue := params.get("queue"):
            workloads = workloads.filter(queue__slug=queue)
        if kind := params.get("kind"):
            workloads = workloads.filter(kind=kind)
        if group := params.get("group"):
            workloads = workloads.filter(group__slug=group)
        if params.get("mine", "").lower() in {"1", "true", "yes"}:
            workloads = workloads.filter(owner_id=request.user.pk)
        if array := params.get("array"):
            try:
                workloads = workloads.filter(array_parent_id=UUID(array)).order_by("array_index")
            except ValueError:
                raise ValidationError({"array": ["Give an array's id."]}) from None
        else:
            workloads = workloads.filter(array_parent__isnull=True)
        page = self.paginate_queryset(workloads) or []
        counts = element_counts([w.pk for w in page if w.is_array])
        context = {"request": request, "element_counts": counts}
        return self.get_paginated_response(WorkloadOut(page, many=True, context=context).data)

    @extend_schema(responses=WorkloadDetailOut)
    def retrieve(self, request: Request, pk: str) -> Response:
        workload = self._workload(pk, scopes.READ)
        return Response(WorkloadDetailOut(workload, context={"request": request}).data)

    @extend_schema(
        request=WorkloadIn,
        responses={201: WorkloadDetailOut, 200: WorkloadDetailOut},
        parameters=[OpenApiParameter("Idempotency-Key", str, OpenApiParameter.HEADER)],
    )
    def create(self, request: Request) -> Response:
        """Submit a workload. Repeating a request with the same Idempotency-Key returns the first one (200).
        Parse, submit, answer: the rules of each step are portal.api.single_submit's."""
        try:
            parsed = single_submit.parse(request)
            workload, created = single_submit.submit(request, parsed)
        except single_submit.REFUSALS as refused:
            return single_submit.refusal(refused)
        if not created:
            return self._detail(workload.pk, status.HTTP_200_OK)
        # A new workload is answered from memory: its queue, team, owner and first event came with it.
        return Response(WorkloadDetailOut(workload, context={"request": request}).data, status.HTTP_201_CREATED)

    @extend_schema(
        request=BulkIn,
        responses={201: BulkOut, 200: BulkOut, 400: BULK_ERRORS, 403: BULK_ERRORS, 429: ERRORS},
    )
    @action(detail=False, methods=["post"])
    def bulk(self, request: Request) -> Response:
        """Submit up to 1,000 workloads at once: every item is checked first, then all are recorded in one
        transaction, or none. Each item may carry its own `idempotency_key` (a repeat answers with the earlier
        workload; a key twice in one request is refused). Bad items are reported by index:
        `{"errors": {"items": {"3": {"resources.gpus": ["..."]}}}}`. 201 when anything was created, else 200.
        The batch counts as one request against the submit rate limit."""
        try:
            ratelimit.check_submit(request.user)
        except ratelimit.RateLimited as limited:
            return Response(
                {"errors": {"detail": [str(limited)]}}, status=429, headers={"Retry-After": str(limited.retry_after)}
            )
        incoming = BulkIn(data=request.data)
        incoming.is_valid(raise_exception=True)
        parsed, errors = incoming.requests()
        items = [(req, key) for _, req, key in parsed]
        scopes.check_queues(request.auth, [req.queue for req, _ in items], scopes.SUBMIT)
        try:
            if errors:  # still check the items that parsed, so that every bad item is named at once
                services.check_submit_many(request.user, items)
                return Response({"errors": {"items": errors}}, status=status.HTTP_400_BAD_REQUEST)
            done = services.submit_many(request.user, items, token=request.auth)
        except services.SubmitRejected as rejected:
            raise ValidationError(rejected.errors) from rejected
        except services.TokenCapSpent as spent:
            raise single_submit.cap_refusal(spent) from spent
        except services.BulkRejected as rejected:
            found = {parsed[i][0]: e for i, e in rejected.errors.items()} | errors
            return Response(
                {"errors": {"items": dict(sorted(found.items()))}}, status=400 if errors else rejected.status
            )
        created = any(new for _, new in done)
        rows = [{"id": w.pk, "name": w.name, "state": w.state, "created": new} for w, new in done]
        return Response({"items": rows}, status=status.HTTP_201_CREATED if created else status.HTTP_200_OK)

    @extend_schema(request=WorkloadIn, responses={200: DryRunOut, 400: ERRORS, 403: ERRORS})
    @action(detail=False, methods=["post"], url_path="dry-run")
    def dry_run(self, request: Request) -> Response:
        """Where a submission would land now, recording nothing: the body of a submit, refused as a submit would
        refuse it (400, 403), else admitted now on a target or waiting (its place, reason and estimated start),
        whether it would borrow, and its cost at the target's prices (portal.worker.dryrun). A dry run is not
        counted against the submit rate limit, and an Idempotency-Key is checked for its form only."""
        generation = auth.confirmed_generation(request)  # (a token this process kept: confirmed, or read again)
        key = request.headers.get("Idempotency-Key")
        if key is not None and not single_submit.IDEMPOTENCY_KEY_RE.fullmatch(key):
            raise ValidationError({"Idempotency-Key": ["Use 1-200 printable ASCII characters."]})
        parsed = WorkloadIn.parse(request.data)
        scopes.check_queue(request.auth, parsed.queue, scopes.SUBMIT)  # refused as its submit would be
        try:
            answer = dryrun.dry_run(request.user, parsed, generation)
        except (services.SubmitRejected, services.QueueForbidden) as refused:
            return single_submit.refusal(refused)
        return Response(rendered(answer))

    @extend_schema(request=BulkIn, responses={200: BulkDryRunOut, 400: BULK_ERRORS, 403: BULK_ERRORS})
    @action(detail=False, methods=["post"], url_path="bulk/dry-run")
    def bulk_dry_run(self, request: Request) -> Response:
        """A bulk submit's dry run: the same body, refused item by item as the bulk submit would refuse it, else
        each item's answer as the single dry run gives it, all items placed together. Records and counts
        nothing."""
        incoming = BulkIn(data=request.data)
        incoming.is_valid(raise_exception=True)
        parsed, errors = incoming.requests()
        items = [(req, key) for _, req, key in parsed]
        scopes.check_queues(request.auth, [req.queue for req, _ in items], scopes.SUBMIT)  # as its submit would
        try:
            if errors:  # still check the items that parsed, so that every bad item is named at once
                services.check_submit_many(request.user, items)
                return Response({"errors": {"items": errors}}, status=status.HTTP_400_BAD_REQUEST)
            answers = dryrun.dry_run_many(request.user, items)
        except services.SubmitRejected as rejected:
            raise ValidationError(rejected.errors) from rejected
        except services.BulkRejected as rejected:
            found = {parsed[i][0]: e for i, e in rejected.errors.items()} | errors
            return Response(
                {"errors": {"items": dict(sorted(found.items()))}}, status=400 if errors else rejected.status
            )
        return Response({"items": [rendered(a) for a in answers]})

    @extend_schema(request=PatchIn, responses={200: WorkloadDetailOut, 400: ERRORS, 403: ERRORS, 409: ERRORS})
    def partial_update(self, request: Request, pk: str) -> Response:
        """Change unfinished work: its priority (the team's leads and IT, within what they may set) and a
        notebook's or VM's lease (longer only; `POST .../extend/` adds hours instead).

        Everything asked for is checked before anything changes.
        """
        workload = self._workload(pk, scopes.MANAGE)
        incoming = PatchIn(data=request.data)
        incoming.is_valid(raise_exception=True)
        priority, lease_hours = incoming.validated_data.get("priority"), incoming.validated_data.get("lease_hours")
        try:
            if priority is not None:
                services.check_reprioritize(request.user, workload, priority)
            more = None if lease_hours is None else services.check_lease_to(request.user, workload, lease_hours)
            if more is not None:  # first: its fabric may still refuse
                services.extend(request.user, workload, more)
            if priority is not None:
                services.do_reprioritize(request.user, workload, priority)
        except services.SubmitRejected as rejected:
            raise ValidationError(rejected.errors) from rejected
        except DjangoPermissionDenied as denied:
            raise PermissionDenied(str(denied)) from denied
        except services.CannotExtend as cannot:
            return Response({"errors": {"lease_hours": [str(cannot)]}}, status=status.HTTP_409_CONFLICT)
        return self._detail(workload.pk, status.HTTP_200_OK)

    @extend_schema(request=None, responses=WorkloadDetailOut)
    @action(detail=True, methods=["post"])
    def cancel(self, request: Request, pk: str) -> Response:
        """Cancel a workload: at once if it has not started, else once its fabric confirms."""
        workload = self._workload(pk, scopes.CANCEL)
        refuse_unknown(request.data, ())  # it takes no fields
        try:
            services.check_cancel(request.user, workload)
        except DjangoPermissionDenied as denied:
            raise PermissionDenied(str(denied)) from denied
        services.do_cancel(request.user, workload)
        return self._detail(workload.pk, status.HTTP_200_OK)

    @extend_schema(request=ExtendIn, responses={200: WorkloadDetailOut, 400: ERRORS, 403: ERRORS, 409: ERRORS})
    @action(detail=True, methods=["post"])
    def extend(self, request: Request, pk: str) -> Response:
        """Extend a pending or running notebook's or VM's lease by some hours, within what its queue allows.

        400: no number of hours, or past the queue's maximum; 403: the caller may not manage it; 409: it is not
        pending or running, or its fabric cannot extend a lease.
        """
        workload = self._workload(pk, scopes.MANAGE)
        incoming = ExtendIn(data=request.data)
        incoming.is_valid(raise_exception=True)
        try:
            services.extend(request.user, workload, incoming.validated_data["hours"])
        except services.SubmitRejected as rejected:
            raise ValidationError(rejected.errors) from rejected
        except DjangoPermissionDenied as denied:
            raise PermissionDenied(str(denied)) from denied
        except services.CannotExtend as cannot:
            return Response({"errors": {"detail": [str(cannot)]}}, status=status.HTTP_409_CONFLICT)
        return self._detail(workload.pk, status.HTTP_200_OK)

    @extend_schema(responses={200: {"type": "object", "properties": {"tail": {"type": "string"}}}})
    @action(detail=True, methods=["get"])
    def logs(self, request: Request, pk: str) -> Response:
        """The end of the workload's output, as the worker last read it from the fabric."""
        return Response({"tail": self._workload(pk, scopes.READ).log_tail})

    def _detail(self, pk: Any, code: int) -> Response:
        response = self.retrieve(self.request, str(pk))
        response.status_code = code
        return response
