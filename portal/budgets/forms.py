"""The team dashboard's "Set a budget" form. It parses types and offers only the team's own people; the rules are
the model's and portal.budgets.services' (the same as IT's admin and the API)."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib.auth import get_user_model
from django.core.exceptions import ValidationError

from portal.accounts.models import Membership, ResourceGroup, ServiceIdentity
from portal.budgets.models import Budget

TEAM = ""  # the user field's choice for the team's own budget


class BudgetForm(forms.Form):
    user = forms.ChoiceField(label="For", required=False, help_text="The team's own budget is IT's to set.")
    gpu_hours = forms.DecimalField(label="GPU-hours", required=False, max_digits=12, decimal_places=1)
    money = forms.DecimalField(label="Money", required=False, max_digits=14, decimal_places=2)
    window = forms.ChoiceField(choices=Budget.Window.choices, initial=Budget.Window.MONTH)
    starts_on = forms.DateField(
        label="First day (custom)", required=False, widget=forms.DateInput(attrs={"type": "date"})
    )
    ends_on = forms.DateField(label="Day after the last (custom)", required=False,
                              widget=forms.DateInput(attrs={"type": "date"}))  # fmt: skip

    def __init__(self, team: ResourceGroup, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        members = Membership.objects.filter(group=team).values_list("user_id", "user__username")
        agents = ServiceIdentity.objects.filter(group=team).values_list("user_id", "user__username")
        field = self.fields["user"]
        assert isinstance(field, forms.ChoiceField)  # noqa: S101 (declared above)
        field.choices = [
            (TEAM, "the team"),
            *[(str(pk), name) for pk, name in members],
            *[(str(pk), f"{name} (agent)") for pk, name in agents],
        ]

    def budget(self, team: ResourceGroup) -> Budget:
        """The scope's budget (its row, where it has one) with the form's values, unsaved."""
        data = self.cleaned_data
        user = get_user_model().objects.get(pk=int(data["user"])) if data["user"] else None
        budget = Budget.objects.filter(team=team, user=user).first() or Budget(team=team, user=user)
        for name in ("gpu_hours", "money", "window", "starts_on", "ends_on"):
            setattr(budget, name, data[name])
        return budget

    def put(self, error: ValidationError) -> None:
        """The service's errors, on the fields they are about (thresholds are not on this form)."""
        for name, messages in error.message_dict.items():
            self.add_error(name if name in self.fields else None, messages)
