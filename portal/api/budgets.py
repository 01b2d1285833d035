"""`POST /api/v1/groups/{slug}/budgets/`: set a budget of the team. IT sets any; a lead of the team sets its
members' and agents' within the team's own (portal.budgets.services, the same checks as IT's admin). One budget per
scope: a second POST for the same scope changes it. Unknown fields are a 400 naming them; a wrong value a 400
naming its field; a caller who reads the team but may not set the budget a 403; anyone else a 404."""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError
from django.utils import timezone
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import serializers
from rest_framework.decorators import api_view
from rest_framework.request import Request
from rest_framework.response import Response

from portal import access
from portal.budgets import services, shown
from portal.budgets.models import Budget, threshold_problem
from portal.known_fields import KnownFieldsOnly

# What a body may leave out keeps what the budget had (a new one: the model's defaults).
FIELDS = ("gpu_hours", "money", "window", "starts_on", "ends_on", "thresholds")


class BudgetIn(KnownFieldsOnly, serializers.Serializer[Any]):
    user = serializers.CharField(
        required=False, allow_null=True, max_length=150, help_text="A member's or agent's username; none: the team."
    )
    gpu_hours = serializers.DecimalField(max_digits=12, decimal_places=1, required=False, allow_null=True)
    money = serializers.DecimalField(max_digits=14, decimal_places=2, required=False, allow_null=True)
    window = serializers.ChoiceField(choices=Budget.Window.choices, required=False)
    starts_on = serializers.DateField(required=False, allow_null=True)
    ends_on = serializers.DateField(required=False, allow_null=True)
    thresholds = serializers.ListField(child=serializers.IntegerField(), required=False, max_length=10)

    def validate_thresholds(self, value: list[int]) -> list[int]:
        problem = threshold_problem(value)
        if problem:
            raise serializers.ValidationError(problem)
        return value


@extend_schema(
    summary="Set a budget of the team: its own (IT), or a member's or agent identity's (IT or a lead)",
    request=BudgetIn,
    responses={
        200: OpenApiResponse(OpenApiTypes.OBJECT, description="The budget as the usage API shows it."),
        400: OpenApiResponse(description='A field is unknown or wrong: `{"errors": {field: [message]}}`.'),
        403: OpenApiResponse(description="The caller reads the team but may not set this budget."),
        404: OpenApiResponse(description="No such team, or not one the caller may see."),
    },
)
@api_view(["POST"])
def set_budget(request: Request, slug: str) -> Response:
    team = access.access_group_usage(request.user, slug)
    body = BudgetIn(data=request.data)
    body.is_valid(raise_exception=True)  # (errors, as every refusal here, in the API's one shape: api/errors.py)
    data = body.validated_data
    user = None
    if data.get("user"):
        user = get_user_model().objects.filter(username=data["user"]).first()
        if user is None:
            raise serializers.ValidationError({"user": ["No such user."]})
    budget = Budget.objects.filter(team=team, user=user).first() or Budget(team=team, user=user)
    for name in FIELDS:
        if name in data:
            setattr(budget, name, data[name])
    try:
        services.check_set(request.user, budget)  # PermissionDenied: a 403
    except ValidationError as error:
        raise serializers.ValidationError(error.message_dict) from error
    now = timezone.now()
    services.do_set(request.user, budget, now)
    (answer,) = [s for s in shown.team_budgets(team, now) if s.budget.pk == budget.pk]
    return Response(answer.as_dict())
