"""API v1 for identities: who am I, and personal tokens (list, create, revoke)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.shortcuts import get_object_or_404
from django.utils import timezone
from drf_spectacular.utils import extend_schema, extend_schema_field
from rest_framework import serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import PermissionDenied
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from portal import access
from portal.accounts import scopes, tokens
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


class ScopesOut(serializers.Serializer[Any]):
    scoped = serializers.BooleanField(help_text="False: the token has its user's full power.")
    read_only = serializers.BooleanField()  # type: ignore[assignment]  # (a field: the metaclass takes it off the class)
    actions = serializers.ListField(child=serializers.ChoiceField(choices=scopes.ACTIONS))
    queues = serializers.ListField(child=serializers.CharField(), help_text="Empty: every queue its user may use.")
    cap_gpu_hours = serializers.DecimalField(max_digits=12, decimal_places=3, allow_null=True)
    cap_money = serializers.DecimalField(max_digits=14, decimal_places=2, allow_null=True)
    currency = serializers.CharField(help_text="The site's currency (GRIDLANE_CURRENCY) of cap_money; empty: unnamed.")


class MeOut(serializers.Serializer[Any]):
    username = serializers.CharField()
    it_staff = serializers.BooleanField()
    teams = TeamOut(many=True)
    agent = AgentOut(allow_null=True, help_text="Set when the caller is an agent (a service identity).")
    token = ScopesOut(allow_null=True, help_text="The scopes of the token the call came with; null: a session.")


class MeView(APIView):
    @extend_schema(responses=MeOut)
    def get(self, request: Request) -> Response:
        """Who the caller is: a person with teams and roles, or an agent with its team, queues and quota; and
        what the token it calls with may do (its scopes)."""
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
        token = scopes.as_data(request.auth) if isinstance(request.auth, ApiToken) else None
        data = {
            "username": user.get_username(),
            "it_staff": access.is_it(user),
            "teams": teams,
            "agent": agent,
            "token": token,
        }
        return Response(MeOut(data).data)


class TokenOut(serializers.ModelSerializer[ApiToken]):
    scopes = serializers.SerializerMethodField()

    class Meta:
        model = ApiToken
        fields = ["id", "name", "hint", "scopes", "created_at", "last_used_at", "expires_at", "revoked_at"]
        read_only_fields = fields

    @extend_schema_field(ScopesOut)
    def get_scopes(self, token: ApiToken) -> dict[str, Any]:
        return dict(ScopesOut(scopes.as_data(token)).data)


class NewTokenOut(TokenOut):
    token = serializers.CharField(help_text="The token itself: shown in this answer only, never again.")

    class Meta(TokenOut.Meta):
        fields = [*TokenOut.Meta.fields, "token"]
        read_only_fields = fields


class TokenIn(KnownFieldsOnly, serializers.Serializer[Any]):
    name = serializers.CharField(max_length=100)
    expires_in_days = serializers.IntegerField(min_value=1, max_value=365, default=30)
    read_only = serializers.BooleanField(default=False, help_text="It may read, and nothing else.")  # type: ignore[assignment]  # (as ScopesOut.read_only)
    actions = serializers.ListField(
        child=serializers.ChoiceField(choices=scopes.ACTIONS), required=False, help_text="Absent: every action."
    )
    queues = serializers.ListField(
        child=serializers.CharField(max_length=50), required=False, max_length=200,
        help_text="Slugs of queues the caller may use; absent or empty: all of them.",
    )  # fmt: skip
    cap_gpu_hours = serializers.DecimalField(
        max_digits=12, decimal_places=3, required=False, allow_null=True,
        help_text="GPU-hours the work it submits may spend in all; absent: no cap of its own.",
    )  # fmt: skip
    cap_money = serializers.DecimalField(
        max_digits=14, decimal_places=2, required=False, allow_null=True,
        help_text="What the work it submits may cost in all, in the site's currency; absent: no cap of its own.",
    )  # fmt: skip

    def scope_fields(self, user: Any) -> dict[str, Any]:
        """The scopes asked for, checked against what `user` may do (400 naming the field)."""
        data = self.validated_data
        try:
            return tokens.check_scopes(
                user,
                read_only=data["read_only"],
                actions=data.get("actions"),
                queues=data.get("queues") or None,
                cap_gpu_hours=data.get("cap_gpu_hours"),
                cap_money=data.get("cap_money"),
            )
        except tokens.ScopeErrors as refused:
            raise serializers.ValidationError(refused.errors) from refused


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
        scope_fields = incoming.scope_fields(request.user)
        expires_at = timezone.now() + timedelta(days=incoming.validated_data["expires_in_days"])
        token, plaintext = tokens.issue(
            request.user, incoming.validated_data["name"], expires_at, by=request.user, scope_fields=scope_fields
        )
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
