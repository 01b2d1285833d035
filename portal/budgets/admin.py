"""IT's budgets in the Django admin: the same validation as a lead's (services.check_set), and a save that counts
the budget's spend at once (a raised budget releases its work at the next admission)."""

from __future__ import annotations

from django import forms
from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils import timezone

from portal.budgets import holds, services
from portal.budgets.models import Budget


@admin.register(Budget)
class BudgetAdmin(admin.ModelAdmin[Budget]):
    list_display = ["team", "scope", "user", "gpu_hours", "money", "window", "spent_gpu_hours", "spent_cost",
                    "held"]  # fmt: skip
    list_filter = ["scope", "window"]
    list_select_related = ["team", "user"]
    search_fields = ["team__slug", "user__username"]
    autocomplete_fields = ["user"]
    fields = ["team", "user", "gpu_hours", "money", "window", "starts_on", "ends_on", "thresholds",
              "spent_gpu_hours", "spent_cost", "spent_at", "held_reason"]  # fmt: skip
    readonly_fields = ["spent_gpu_hours", "spent_cost", "spent_at", "held_reason"]

    @admin.display(boolean=True, description="work held")
    def held(self, obj: Budget) -> bool:
        return bool(obj.held_reason)

    def delete_model(self, request: HttpRequest, obj: Budget) -> None:
        super().delete_model(request, obj)
        holds.sweep()

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Budget]) -> None:
        super().delete_queryset(request, queryset)
        holds.sweep()

    def save_model(self, request: HttpRequest, obj: Budget, form: forms.ModelForm[Budget], change: bool) -> None:
        services.do_set(request.user, obj, timezone.now())
