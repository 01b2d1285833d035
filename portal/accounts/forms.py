"""Forms for personal tokens and agents. Who may choose which team or queue comes from `portal.access`."""

from __future__ import annotations

from datetime import datetime, time, timedelta
from typing import Any

from django import forms
from django.conf import settings
from django.contrib.auth import get_user_model
from django.utils import timezone

from portal import access
from portal.accounts import agents, scopes, tokens
from portal.accounts.models import ResourceGroup, ServiceIdentity
from portal.queues.models import Queue

TOKEN_LIFETIMES = [(7, "7 days"), (30, "30 days"), (90, "90 days"), (365, "a year")]


class TokenForm(forms.Form):
    """A new token for `user` (the person, or an agent's user row): its name, lifetime and scopes.

    No scope chosen: the token has its user's full power. Queues offered are those the user may use."""

    name = forms.CharField(max_length=100, help_text="What the token is for, e.g. “laptop CLI”.")
    expires_in_days = forms.TypedChoiceField(label="Expires after", choices=TOKEN_LIFETIMES, coerce=int, initial=30)
    read_only = forms.BooleanField(required=False, help_text="It may read, and nothing else.")
    actions = forms.MultipleChoiceField(
        required=False,
        choices=[(a, f"{a}: {scopes.ACTION_HELP[a]}") for a in scopes.ACTIONS],
        widget=forms.CheckboxSelectMultiple,
        help_text="None ticked: every action.",
    )
    queues = forms.MultipleChoiceField(
        required=False,
        help_text="None chosen: every queue you may use.",
        widget=forms.SelectMultiple(attrs={"size": 4}),
    )
    cap_gpu_hours = forms.DecimalField(
        label="Cap (GPU-hours)",
        required=False,
        max_digits=12,
        decimal_places=3,
        help_text="GPU-hours the work it submits may spend in all. Empty: no cap of its own.",
    )
    cap_money = forms.DecimalField(
        label="Cap (money)",
        required=False,
        max_digits=14,
        decimal_places=2,
        help_text="What the work it submits may cost in all, at the fabrics' prices, in the site's currency. "
        "Empty: no cap of its own.",
    )

    def __init__(self, *args: Any, user: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.user = user
        queues = self.fields["queues"]
        assert isinstance(queues, forms.MultipleChoiceField)  # noqa: S101 (declared above)
        queues.choices = [(q.slug, q.name) for q in access.usable_queues(user).order_by("slug")]

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        if self.errors:
            return data
        try:
            self.scope_fields = tokens.check_scopes(
                self.user,
                read_only=data.get("read_only", False),
                actions=data.get("actions") or None,
                queues=data.get("queues") or None,
                cap_gpu_hours=data.get("cap_gpu_hours"),
                cap_money=data.get("cap_money"),
            )
        except tokens.ScopeErrors as refused:
            for field, messages in refused.errors.items():
                for message in messages:
                    self.add_error(field, message)
        return data

    def expires_at(self, cap: datetime | None = None) -> datetime:
        """The expiry chosen, never later than `cap` (an agent's own expiry)."""
        chosen = timezone.now() + timedelta(days=self.cleaned_data["expires_in_days"])
        return min(chosen, cap) if cap is not None else chosen


def end_of_day(day: Any) -> datetime:
    return datetime.combine(day, time(23, 59, 59), tzinfo=timezone.get_current_timezone())


class AgentForm(forms.ModelForm[ServiceIdentity]):
    """Create (with a name and team) or change an agent; quotas are checked against the team's by the model."""

    name = forms.SlugField(
        max_length=60,
        help_text=f"Lower-case letters, digits and dashes; the agent signs as “{agents.username_for('name')}”.",
    )
    expires_on = forms.DateField(
        label="Expires on", widget=forms.DateInput(attrs={"type": "date"}), help_text="At most a year from today."
    )

    field_order = [
        "name",
        "group",
        "description",
        "allowed_queues",
        "expires_on",
        "rate_limit_per_minute",
        "gpu_reservation_milli",
        "gpu_limit_milli",
    ]

    class Meta:
        model = ServiceIdentity
        fields = [
            "group",
            "description",
            "allowed_queues",
            "rate_limit_per_minute",
            "gpu_reservation_milli",
            "gpu_limit_milli",
        ]
        widgets = {"allowed_queues": forms.CheckboxSelectMultiple}
        labels = {"group": "Team"}

    def __init__(self, *args: Any, user: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        groups = access.agent_groups(user)
        group_field = self.fields["group"]
        assert isinstance(group_field, forms.ModelChoiceField)  # noqa: S101 (a ForeignKey's form field)
        group_field.queryset = groups
        queues_field = self.fields["allowed_queues"]
        assert isinstance(queues_field, forms.ModelMultipleChoiceField)  # noqa: S101 (a ManyToMany's form field)
        queues_field.queryset = Queue.objects.filter(enabled=True, allowed_groups__in=groups).distinct()
        if self.instance.pk is not None:  # name and team are fixed once the agent exists
            del self.fields["name"]
            del self.fields["group"]
            self.initial["expires_on"] = timezone.localdate(self.instance.expires_at)
        else:
            self.initial.setdefault("expires_on", timezone.localdate() + timedelta(days=90))

    def clean_name(self) -> str:
        name: str = self.cleaned_data["name"].lower()
        if get_user_model().objects.filter(username=agents.username_for(name)).exists():
            raise forms.ValidationError("There is already an agent with that name.")
        return name

    def clean_expires_on(self) -> Any:
        day = self.cleaned_data["expires_on"]
        today = timezone.localdate()
        if day < today:
            raise forms.ValidationError("Choose a day from today on.")
        if day > today + timedelta(days=settings.GRIDLANE_AGENT_MAX_DAYS):
            raise forms.ValidationError(f"Choose a day at most {settings.GRIDLANE_AGENT_MAX_DAYS} days away.")
        return day

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        group: ResourceGroup | None = data.get("group") or (self.instance.group if self.instance.pk else None)
        queues = data.get("allowed_queues") or []
        if group is not None:
            outside = [q.slug for q in queues if not q.allowed_groups.filter(pk=group.pk).exists()]
            if outside:
                self.add_error("allowed_queues", f"Not open to {group.slug}: {', '.join(outside)}.")
        if data.get("expires_on"):
            self.instance.expires_at = end_of_day(data["expires_on"])
        return data
