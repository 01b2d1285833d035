"""API v1 for identities: who am I, and personal tokens (list, create, revoke)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.shortcuts import get_object_or_404
from django.utils import timezone
from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import PermissionDenied
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from portal import access
from portal.accounts import tokens
from portal.accounts.models import ApiToken
from portal.known_fields import KnownFieldsOnly, refuse_unknown


class TeamOut(serializers.Serializer[Any]):
    slug = serializers.CharField()
    role = serializers.CharField()


class AgentOut(serializers.Serializer[Any]):
    team = serializers.CharField()
    queues = serializers.ListField(child=serializers.CharField(), help_text="Empty: all of the team's queues.")
    expires_at = serializers.DateTimeField()
    rate_limit_per_minute = serializers.IntegerField()
    gpu_reservation_milli = serializers.IntegerField()
    gpu_limit_milli = serializers.IntegerField(allow_null=True)


class MeOut(serializers.Serializer[Any]):
    username = serializers.CharField()
    it_staff = serializers.BooleanField()
    teams = TeamOut(many=True)
    agent = AgentOut(allow_null=True, help_text="Set when the caller is an agent (a service identity).")


class MeView(APIView):
    @extend_schema(responses=MeOut)
    def get(self, request: Request) -> Response:
        """Who the caller is: a person with teams and roles, or an agent with its team, queues and quota."""
        user = request.user
        service = access.service_of(user)
        agent = None
        teams = [
            {"slug": m.group.slug, "role": m.role}
            for m in user.memberships.select_related("group").order_by("group__slug")  # type: ignore[union-attr]
        ]
        if service is not None:
            teams = [{"slug": service.group.slug, "role": "agent"}]
            agent = {
                "team": service.group.slug,
                "queues": [q.slug for q in service.allowed_queues.all()],
                "expires_at": service.expires_at,
                "rate_limit_per_minute": service.rate_limit_per_minute,
                "gpu_reservation_milli": service.gpu_reservation_milli,
                "gpu_limit_milli": service.gpu_limit_milli,
            }
        data = {"username": user.get_username(), "it_staff": access.is_it(user), "teams": teams, "agent": agent}
        return Response(MeOut(data).data)


class TokenOut(serializers.ModelSerializer[ApiToken]):
    class Meta:
        model = ApiToken
        fields = ["id", "name", "hint", "created_at", "last_used_at", "expires_at", "revoked_at"]
        read_only_fields = fields


class NewTokenOut(TokenOut):
    token = serializers.CharField(help_text="The token itself: shown in this answer only, never again.")

    class Meta(TokenOut.Meta):
        fields = [*TokenOut.Meta.fields, "token"]
        read_only_fields = fields


class TokenIn(KnownFieldsOnly, serializers.Serializer[Any]):
    name = serializers.CharField(max_length=100)
    expires_in_days = serializers.IntegerField(min_value=1, max_value=365, default=30)


class TokenViewSet(viewsets.GenericViewSet[ApiToken]):
    """The caller's personal tokens. Agents cannot mint tokens: their team's leads or IT do, on the Agents page."""

    serializer_class = TokenOut
    pagination_class = None
    lookup_value_regex = "[0-9]{1,18}"

    def get_queryset(self) -> Any:
        return ApiToken.objects.filter(user_id=self.request.user.pk or 0)  # authenticated: pk is set

    def initial(self, request: Request, *args: Any, **kwargs: Any) -> None:
        super().initial(request, *args, **kwargs)
        if not access.may_issue_personal_tokens(request.user):
            raise PermissionDenied("Agents do not manage tokens; their team's leads or IT do.")

    @extend_schema(responses=TokenOut(many=True))
    def list(self, request: Request) -> Response:
        return Response(TokenOut(self.get_queryset(), many=True).data)

    @extend_schema(request=TokenIn, responses={201: NewTokenOut})
    def create(self, request: Request) -> Response:
        """A new personal token; the answer carries the token itself, once."""
        incoming = TokenIn(data=request.data)
        incoming.is_valid(raise_exception=True)
        expires_at = timezone.now() + timedelta(days=incoming.validated_data["expires_in_days"])
        token, plaintext = tokens.issue(request.user, incoming.validated_data["name"], expires_at, by=request.user)
        data = {**TokenOut(token).data, "token": plaintext}
        return Response(data, status=status.HTTP_201_CREATED)

    @extend_schema(request=None, responses=TokenOut)
    @action(detail=True, methods=["post"])
    def revoke(self, request: Request, pk: str) -> Response:
        """Revoke one of the caller's tokens (revoking the one in use works too, as the last thing it does)."""
        token = get_object_or_404(self.get_queryset(), pk=pk)
        refuse_unknown(request.data, ())  # it takes no fields
        tokens.revoke(token, by=request.user)
        token.refresh_from_db()
        return Response(TokenOut(token).data)
