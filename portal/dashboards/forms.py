"""The "Ask for more GPUs" form. It parses types; the rules are the model's and portal.queues.grants'."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal
from typing import Any

from django import forms
from django.core.exceptions import ValidationError
from django.utils import timezone

from portal.queues.grants import Ask
from portal.queues.models import GRANT_MAX_DAYS, Fabric

# The grant's errors by model field -> this form's fields.
FIELD_OF = {"gpus_milli": "gpus", "ends_at": "length", "starts_at": "starts_at", "fabric": "fabric", "reason": "reason"}


class GrantForm(forms.Form):
    fabric = forms.ModelChoiceField(queryset=Fabric.objects.filter(enabled=True), empty_label=None)
    gpus = forms.DecimalField(
        label="More GPUs",
        min_value=Decimal("0.001"),
        max_value=100_000,
        decimal_places=3,
        help_text="Added to both the team's reservation and its limit there, e.g. 4 or 0.5.",
    )
    starts_at = forms.DateTimeField(
        label="From (UTC)", widget=forms.DateTimeInput(attrs={"type": "datetime-local"}, format="%Y-%m-%dT%H:%M")
    )
    length = forms.IntegerField(label="For", min_value=1, max_value=GRANT_MAX_DAYS * 24)
    unit = forms.ChoiceField(label="Hours or days", choices=[("days", "days"), ("hours", "hours")])
    reason = forms.CharField(
        label="Why", max_length=2000, widget=forms.Textarea(attrs={"rows": 3}), help_text="What IT reads to decide."
    )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["starts_at"].initial = timezone.now().replace(second=0, microsecond=0)
        self.fields["length"].initial = 7

    def ask(self) -> Ask:
        data = self.cleaned_data
        per = timedelta(days=1) if data["unit"] == "days" else timedelta(hours=1)
        return Ask(
            fabric=data["fabric"],
            gpus_milli=int(data["gpus"] * 1000),
            starts_at=data["starts_at"],
            ends_at=data["starts_at"] + data["length"] * per,
            reason=data["reason"],
        )

    def put(self, error: ValidationError) -> None:
        """The service's errors, on the fields they are about."""
        if not hasattr(error, "error_dict"):
            self.add_error(None, error)
            return
        for name, messages in error.message_dict.items():
            self.add_error(FIELD_OF.get(name), messages)


class DecisionForm(forms.Form):
    decision = forms.ChoiceField(choices=[("approve", "approve"), ("decline", "decline")])
    note = forms.CharField(max_length=300, required=False)
