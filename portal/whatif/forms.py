"""The what-if form: how many days to replay, and one proposed change in the units people use (GPUs)."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from django import forms
from django.core.validators import MinValueValidator

from portal.whatif.models import MAX_DAYS

KINDS = [
    ("none", "No change: the current policy only"),
    ("quota", "A team's reservation and limit on a fabric"),
    ("capacity", "A fabric's GPUs"),
    ("weight", "A team's fair-share weight"),
    ("department", "A team's department (another team above it, or none)"),
]
NOT_NEGATIVE = [MinValueValidator(Decimal(0), "A number of GPUs, 0 or more.")]


class WhatIfForm(forms.Form):
    days = forms.IntegerField(
        min_value=1, max_value=MAX_DAYS, initial=30, help_text=f"The last 1 to {MAX_DAYS} days of the site's work."
    )
    kind = forms.ChoiceField(choices=KINDS, initial="none", label="Change", widget=forms.RadioSelect)
    team = forms.ChoiceField(required=False, help_text="For a quota or a weight.")
    fabric = forms.ChoiceField(required=False, help_text="For a quota (empty: all fabrics) or capacity.")
    gpu_reservation = forms.DecimalField(
        required=False, label="GPU reservation", decimal_places=3, validators=NOT_NEGATIVE
    )
    gpu_limit = forms.DecimalField(
        required=False, label="GPU limit", decimal_places=3, validators=NOT_NEGATIVE, help_text="Empty: no cap."
    )
    gpus = forms.DecimalField(required=False, label="GPUs on the fabric", decimal_places=3, validators=NOT_NEGATIVE)
    fair_share_weight = forms.IntegerField(required=False, min_value=1, label="Fair-share weight")
    parent = forms.ChoiceField(required=False, label="Department", help_text="For a department change: empty, none.")

    def __init__(self, *args: Any, teams: list[str], fabrics: list[str], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["team"].choices = [("", "—"), *((t, t) for t in teams)]  # type: ignore[attr-defined]
        self.fields["fabric"].choices = [("", "—"), *((f, f) for f in fabrics)]  # type: ignore[attr-defined]
        self.fields["parent"].choices = [("", "—"), *((t, t) for t in teams)]  # type: ignore[attr-defined]

    def change(self) -> dict[str, Any]:
        """The proposed change in scheduler.replay.apply_change's form ({} for none); after is_valid()."""
        data = self.cleaned_data
        kind = data["kind"]
        if kind == "capacity":
            return {"capacity": {"fabric": data["fabric"], "gpus": _float(data["gpus"])}}
        if kind == "weight":
            return {"weight": {"team": data["team"], "fair_share_weight": data["fair_share_weight"]}}
        if kind == "department":
            return {"department": {"team": data["team"], "parent": data["parent"] or None}}
        if kind == "quota":
            return {"quota": {"team": data["team"], "fabric": data["fabric"] or None,
                              "gpu_reservation": _float(data["gpu_reservation"]) or 0.0,
                              "gpu_limit": _float(data["gpu_limit"])}}  # fmt: skip
        return {}

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        kind = data.get("kind")
        needs = {
            "quota": ["team"],
            "capacity": ["fabric", "gpus"],
            "weight": ["team", "fair_share_weight"],
            "department": ["team"],
        }
        for name in needs.get(kind or "", []):
            if data.get(name) in (None, "") and name not in self.errors:
                self.add_error(name, "Needed for this change.")
        return data


def _float(value: Decimal | None) -> float | None:
    return None if value is None else float(value)
