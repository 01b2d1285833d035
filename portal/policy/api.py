"""`/api/v1/admin/<kind>/[<key>/]`: IT's API for policy objects (portal.policy.kinds), list, read, create, update
(PATCH: the fields given; PUT: the whole object) and delete.

IT only (portal.access.is_it): anyone else gets 403, and a request without credentials 401. A change names the
version it read (the If-Match header, or a `version` field) and is refused with 409 when the object has changed
since. Errors have the API's shape, `{"errors": {field: [message]}}`; unknown fields are refused by name.
"""

from __future__ import annotations

from typing import Any

from django.db import transaction
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import permissions, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from portal import access
from portal.policy import changes
from portal.policy.kinds import KINDS, Kind


class IsIT(permissions.BasePermission):
    message = "Only IT may read or change policy here."

    def has_permission(self, request: Request, view: Any) -> bool:
        return access.is_it(request.user)


def _kind(name: str) -> Kind | None:
    return KINDS.get(name)


def _missing(what: str) -> Response:
    return Response({"errors": {"detail": [f"No such {what}."]}}, status=status.HTTP_404_NOT_FOUND)


def _refused(error: changes.Refused) -> Response:
    return Response({"errors": error.errors}, status=error.status)


def _body(request: Request) -> dict[str, Any] | Response:
    if not isinstance(request.data, dict):
        return Response({"errors": {"detail": ["Send a JSON object."]}}, status=status.HTTP_400_BAD_REQUEST)
    return dict(request.data)


def _answer(kind: Kind, obj: Any, code: int = status.HTTP_200_OK) -> Response:
    body = changes.shown(kind, obj)
    return Response(body, status=code, headers={"ETag": f'"{body["version"]}"'})


ANY = OpenApiResponse(OpenApiTypes.OBJECT)


class KindList(APIView):
    permission_classes = [permissions.IsAuthenticated, IsIT]

    @extend_schema(
        operation_id="admin_list",
        summary="Every object of one kind of policy (IT)",
        responses={200: ANY, 403: ANY, 404: ANY},
    )
    def get(self, request: Request, kind: str) -> Response:
        found = _kind(kind)
        if found is None:
            return _missing("kind of policy object")
        items = [changes.shown(found, obj) for obj in found.queryset()]
        return Response({"items": sorted(items, key=lambda i: i["key"])})

    @extend_schema(operation_id="admin_create", summary="Create a policy object (IT)", request=OpenApiTypes.OBJECT,
                   responses={201: ANY, 400: ANY, 403: ANY, 404: ANY})  # fmt: skip
    def post(self, request: Request, kind: str) -> Response:
        found = _kind(kind)
        if found is None:
            return _missing("kind of policy object")
        body = _body(request)
        if isinstance(body, Response):
            return body
        try:
            with transaction.atomic():
                obj = changes.do_save(changes.check_save(found, body))
        except changes.Refused as error:
            return _refused(error)
        return _answer(found, found.queryset().get(pk=obj.pk), status.HTTP_201_CREATED)


class KindItem(APIView):
    permission_classes = [permissions.IsAuthenticated, IsIT]

    @extend_schema(
        operation_id="admin_retrieve", summary="One policy object (IT)", responses={200: ANY, 403: ANY, 404: ANY}
    )
    def get(self, request: Request, kind: str, key: str) -> Response:
        found = _kind(kind)
        obj = found.get(key) if found is not None else None
        if found is None or obj is None:
            return _missing("object")
        return _answer(found, obj)

    @extend_schema(operation_id="admin_partial_update", summary="Change the fields given (IT)",
                   request=OpenApiTypes.OBJECT,
                   responses={200: ANY, 400: ANY, 404: ANY, 409: ANY, 428: ANY})  # fmt: skip
    def patch(self, request: Request, kind: str, key: str) -> Response:
        return self._change(request, kind, key, partial=True)

    @extend_schema(operation_id="admin_update", summary="Replace the object's fields (IT)", request=OpenApiTypes.OBJECT,
                   responses={200: ANY, 400: ANY, 404: ANY, 409: ANY, 428: ANY})  # fmt: skip
    def put(self, request: Request, kind: str, key: str) -> Response:
        return self._change(request, kind, key, partial=False)

    @extend_schema(
        operation_id="admin_destroy",
        summary="Delete the object (IT)",
        responses={204: None, 400: ANY, 404: ANY, 409: ANY, 428: ANY},
    )
    def delete(self, request: Request, kind: str, key: str) -> Response:
        found = _kind(kind)
        if found is None:
            return _missing("object")
        try:
            with transaction.atomic():
                obj = self._locked(found, key)
                if obj is None:
                    return _missing("object")
                changes.check_version(found, obj, _expected(request, {}))
                changes.check_delete(found, obj)
                changes.do_delete(found, obj)
        except changes.Refused as error:
            return _refused(error)
        return Response(status=status.HTTP_204_NO_CONTENT)

    def _change(self, request: Request, kind: str, key: str, partial: bool) -> Response:
        found = _kind(kind)
        if found is None:
            return _missing("object")
        body = _body(request)
        if isinstance(body, Response):
            return body
        try:
            with transaction.atomic():
                obj = self._locked(found, key)
                if obj is None:
                    return _missing("object")
                changes.check_fields(found, body)
                changes.check_version(found, obj, _expected(request, body))
                obj = changes.do_save(changes.check_save(found, body, obj, partial=partial))
        except changes.Refused as error:
            return _refused(error)
        return _answer(found, found.queryset().get(pk=obj.pk))

    @staticmethod
    def _locked(kind: Kind, key: str) -> Any:
        """The object, its row locked until the change commits (so that its version cannot move under it)."""
        try:
            where = kind.lookup(key)
        except LookupError:
            return None
        return kind.queryset().select_for_update(of=("self",)).filter(where).first()


def _expected(request: Request, body: dict[str, Any]) -> str | None:
    """The version the caller read: If-Match, else the body's `version`; None when neither is sent."""
    header = request.headers.get("If-Match")
    if header:
        return header.strip()
    value = body.get("version")
    return str(value) if value is not None else None
