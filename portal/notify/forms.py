from __future__ import annotations

from typing import Any

from django import forms

from portal.notify.models import WORK_EVENTS, Preference
from portal.notify.send import webhook_target


class PreferenceForm(forms.ModelForm[Preference]):
    """What a person hears about and where; nothing is sent until they ask for it."""

    events = forms.MultipleChoiceField(
        label="Tell me when my work",
        choices=[(e.value, e.label[0].lower() + e.label[1:]) for e in WORK_EVENTS],
        widget=forms.CheckboxSelectMultiple,
        required=False,
    )

    webhook_url = forms.URLField(
        label="Webhook URL",
        max_length=500,
        required=False,
        assume_scheme="https",
        help_text="A Slack or Teams incoming webhook, or any that takes JSON.",
    )

    class Meta:
        model = Preference
        fields = ["email", "email_to", "webhook_url", "events"]

    def clean_webhook_url(self) -> str:
        url = str(self.cleaned_data.get("webhook_url") or "").strip()
        if url:
            try:
                webhook_target(url)  # the name resolved and every address checked (portal.outbound)
            except ValueError as problem:
                raise forms.ValidationError(str(problem)) from None
        return url

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        user = self.instance.user
        if data.get("email") and not (data.get("email_to") or getattr(user, "email", "")):
            self.add_error("email_to", "Your sign-in gives no e-mail address: give one here.")
        return data
