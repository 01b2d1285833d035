"""The "New training run" form. It parses types; the rules are the services' (one road for form and API)."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from django import forms

from portal import access
from portal.workloads.models import Priority
from portal.workloads.services import SubmitRequest

# Service error keys -> form fields.
FIELD_OF = {
    "resources.gpus": "gpus",
    "resources.cpus": "cpus",
    "resources.memory_gb": "memory_gb",
    "resources.nodes": "nodes",
    "resources": "gpus",
}


class TrainingForm(forms.Form):
    """Fields parse types only (no ranges here), so every rule is checked, and reported, in one place."""

    queue = forms.ChoiceField()
    kind = forms.ChoiceField(choices=[("training", "Training run"), ("batch", "Batch job")], initial="training")
    name = forms.CharField(max_length=100, widget=forms.TextInput(attrs={"placeholder": "llama-finetune"}))
    command = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 3, "placeholder": "python train.py --epochs 3", "spellcheck": "false"}),
        strip=False,
    )
    gpus = forms.DecimalField(
        label="GPUs per node",
        decimal_places=3,
        initial=Decimal(1),
        help_text="Fractions below one share a GPU, e.g. 0.25.",
    )
    cpus = forms.DecimalField(label="CPUs per node", decimal_places=3, initial=Decimal(4))
    memory_gb = forms.DecimalField(label="Memory per node (GB)", decimal_places=3, initial=Decimal(16))
    nodes = forms.IntegerField(initial=1, help_text="More than one runs all nodes together or not at all.")
    runtime_limit_minutes = forms.IntegerField(label="Runtime limit (minutes)", initial=60)
    priority = forms.ChoiceField(choices=Priority.choices, initial=Priority.NORMAL)
    group = forms.ChoiceField(label="Team", required=False)

    def __init__(self, *args: Any, user: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        queues = access.usable_queues(user).prefetch_related("allowed_groups")
        queue_field = self.fields["queue"]
        assert isinstance(queue_field, forms.ChoiceField)  # noqa: S101 (declared above)
        queue_field.choices = [(q.slug, q.name) for q in queues if {"training", "batch"} & set(q.kinds)]
        mine = set(access.member_group_ids(user))
        it = access.is_it(user)  # IT may submit for any team a queue is open to
        groups = sorted({(g.slug, g.name) for q in queues for g in q.allowed_groups.all() if it or g.pk in mine})
        group_field = self.fields["group"]
        assert isinstance(group_field, forms.ChoiceField)  # noqa: S101 (declared above)
        group_field.choices = [("", "My team"), *groups]
        if len(groups) <= 1:
            self.fields["group"].widget = forms.HiddenInput()

    def to_request(self) -> SubmitRequest:
        d = self.cleaned_data
        return SubmitRequest(
            queue=d["queue"],
            kind=d["kind"],
            name=d["name"],
            command=d["command"],
            gpus=d["gpus"],
            cpus=d["cpus"],
            memory_gb=d["memory_gb"],
            nodes=d["nodes"],
            runtime_limit_minutes=d["runtime_limit_minutes"],
            priority=d["priority"],
            group=d["group"] or None,
        )

    def add_service_errors(self, errors: dict[str, list[str]]) -> None:
        for key, messages in errors.items():
            field = FIELD_OF.get(key, key)
            for message in messages:
                self.add_error(field if field in self.fields else None, message)
