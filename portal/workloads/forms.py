"""The "New training run" form. It parses types; the rules are the services' (one road for form and API)."""

from __future__ import annotations

from decimal import Decimal
from typing import Any, ClassVar

from django import forms
from django.db.models import Prefetch

from portal import access
from portal.queues.models import QueueTarget
from portal.workloads.guide import QueueGuide, queue_guide
from portal.workloads.models import Priority, Workload
from portal.workloads.services import SubmitRequest

# Service error keys -> form fields.
FIELD_OF = {
    "resources.gpus": "gpus",
    "resources.cpus": "cpus",
    "resources.memory_gb": "memory_gb",
    "resources.nodes": "nodes",
    "resources": "gpus",
}


class SubmitForm(forms.Form):
    """What every submission form shares: the queues open to the user for its kinds of work, the teams it
    may submit for, and the services' errors put on the fields they are about."""

    kinds: ClassVar[frozenset[str]]
    # Service error keys -> this form's fields, where they differ from FIELD_OF.
    fields_of: ClassVar[dict[str, str]] = {}
    # Each form declares `queue` and `group` itself, where it wants them shown.

    def __init__(self, *args: Any, user: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        served = Prefetch("targets", QueueTarget.objects.filter(fabric__enabled=True).select_related("fabric"))
        queues = access.usable_queues(user).prefetch_related("allowed_groups", served)
        queue_field = self.fields["queue"]
        assert isinstance(queue_field, forms.ChoiceField)  # noqa: S101 (declared above)
        self.user = user
        # A queue no fabric serves is never the first (default) choice, and says so.
        offered = [q for q in queues if self.kinds & set(q.kinds)]
        self.queue_objects = sorted(offered, key=lambda q: not q.targets.all())
        queue_field.choices = [
            (q.slug, q.name if q.targets.all() else f"{q.name} (no fabric yet)") for q in self.queue_objects
        ]
        mine = set(access.member_group_ids(user))
        it = access.is_it(user)  # IT may submit for any team a queue is open to
        groups = sorted({(g.slug, g.name) for q in queues for g in q.allowed_groups.all() if it or g.pk in mine})
        group_field = self.fields["group"]
        assert isinstance(group_field, forms.ChoiceField)  # noqa: S101 (declared above)
        group_field.choices = [("", "My team"), *groups]
        if len(groups) <= 1:
            self.fields["group"].widget = forms.HiddenInput()

    @classmethod
    def initial_from(cls, w: Workload) -> dict[str, Any]:
        """This form's values for a copy of `w` (Clone, Relaunch): its request, its queue and its team."""
        return {"queue": w.queue.slug, "name": w.name, "group": w.group.slug}

    def guide(self) -> list[QueueGuide]:
        """What the form shows beside its fields: each offered queue's rules, the room it has now and the
        team's headroom (one round of queries, see portal.workloads.guide)."""
        return queue_guide(self.user, self.queue_objects)

    def add_service_errors(self, errors: dict[str, list[str]]) -> None:
        for key, messages in errors.items():
            field = self.fields_of.get(key) or FIELD_OF.get(key, key)
            for message in messages:
                self.add_error(field if field in self.fields else None, message)


class ExtendForm(forms.Form):
    """Extend a notebook's or VM's lease by some hours; how many may be added is the services' rule."""

    hours = forms.DecimalField(label="Extend the lease by (hours)", max_digits=7, decimal_places=2)


class TrainingForm(SubmitForm):
    """Fields parse types only (no ranges here), so every rule is checked, and reported, in one place."""

    kinds = frozenset({"training", "batch"})
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

    @classmethod
    def initial_from(cls, w: Workload) -> dict[str, Any]:
        return super().initial_from(w) | {
            "kind": w.kind,
            "command": w.command,
            "gpus": w.gpus.normalize(),
            "cpus": w.cpus.normalize(),
            "memory_gb": w.memory_gb,
            "nodes": w.nodes,
            "runtime_limit_minutes": max(1, w.runtime_limit_s // 60),
            "priority": w.priority,
        }

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


class BatchScriptForm(SubmitForm):
    """A batch script pasted as written (sbatch or qsub): its directives are the request."""

    kinds = frozenset({"training", "batch"})
    queue = forms.ChoiceField()
    kind = forms.ChoiceField(choices=[("batch", "Batch job"), ("training", "Training run")], initial="batch")
    name = forms.CharField(max_length=100, required=False, help_text="Empty: the script's job name.")
    script = forms.CharField(
        label="Batch script",
        strip=False,
        widget=forms.Textarea(
            attrs={"rows": 14, "spellcheck": "false", "placeholder": "#!/bin/bash\n#SBATCH --gpus-per-node=1\n..."}
        ),
        help_text="Submitted byte for byte; its #SBATCH or #PBS lines say what it needs.",
    )
    array = forms.CharField(max_length=200, required=False, help_text="An array, e.g. 0-99%10 (or --array in it).")
    priority = forms.ChoiceField(choices=Priority.choices, initial=Priority.NORMAL)
    group = forms.ChoiceField(label="Team", required=False)

    def to_request(self) -> SubmitRequest:
        d = self.cleaned_data
        return SubmitRequest(
            queue=d["queue"], kind=d["kind"], name=d["name"], script=d["script"].replace("\r\n", "\n"),
            array=d["array"], priority=d["priority"], group=d["group"] or None,
        )  # fmt: skip


class NotebookForm(SubmitForm):
    """A Jupyter notebook for a lease of some hours; the lease is also its runtime limit."""

    kinds = frozenset({"notebook"})
    fields_of: ClassVar[dict[str, str]] = {"runtime_limit_minutes": "lease_hours"}
    queue = forms.ChoiceField()
    name = forms.CharField(max_length=100, widget=forms.TextInput(attrs={"placeholder": "explore-embeddings"}))
    gpus = forms.DecimalField(
        label="GPUs", decimal_places=3, initial=Decimal("0.25"), help_text="Fractions below one share a GPU."
    )
    cpus = forms.DecimalField(label="CPUs", decimal_places=3, initial=Decimal(2))
    memory_gb = forms.DecimalField(label="Memory (GB)", decimal_places=3, initial=Decimal(8))
    image = forms.CharField(
        label="Image or environment",
        required=False,
        help_text="A container image, where the queue's fabric runs containers; empty for the default.",
    )
    lease_hours = forms.DecimalField(label="Lease (hours)", decimal_places=2, initial=Decimal(8))
    group = forms.ChoiceField(label="Team", required=False)

    @classmethod
    def initial_from(cls, w: Workload) -> dict[str, Any]:
        return super().initial_from(w) | {
            "gpus": w.gpus.normalize(),
            "cpus": w.cpus.normalize(),
            "memory_gb": w.memory_gb,
            "image": w.image,
            "lease_hours": w.lease_hours or Decimal(w.runtime_limit_s) / 3600,
        }

    def to_request(self) -> SubmitRequest:
        d = self.cleaned_data
        lease = d["lease_hours"]
        return SubmitRequest(
            queue=d["queue"],
            kind="notebook",
            name=d["name"],
            image=d["image"],
            gpus=d["gpus"],
            cpus=d["cpus"],
            memory_gb=d["memory_gb"],
            runtime_limit_minutes=max(1, int(lease * 60)) if lease > 0 else None,
            lease_hours=lease,
            group=d["group"] or None,
        )


# VM and bare-metal sizes offered on the lease form: label -> (GPUs, CPUs, memory GB).
VM_SIZES = {
    "small": ("1 GPU, 8 CPUs, 64 GB", Decimal(1), Decimal(8), Decimal(64)),
    "medium": ("2 GPUs, 16 CPUs, 128 GB", Decimal(2), Decimal(16), Decimal(128)),
    "large": ("4 GPUs, 32 CPUs, 256 GB", Decimal(4), Decimal(32), Decimal(256)),
    "full": ("8 GPUs, 64 CPUs, 512 GB", Decimal(8), Decimal(64), Decimal(512)),
}


class VMForm(SubmitForm):
    """A VM or bare-metal lease: a size, some hours, and the SSH public key it lets in."""

    kinds = frozenset({"vm"})
    fields_of: ClassVar[dict[str, str]] = {
        "runtime_limit_minutes": "lease_hours",
        "resources": "size",
        "resources.gpus": "size",
        "resources.cpus": "size",
        "resources.memory_gb": "size",
        "resources.nodes": "size",
    }
    queue = forms.ChoiceField()
    name = forms.CharField(max_length=100, widget=forms.TextInput(attrs={"placeholder": "debug-box"}))
    size = forms.ChoiceField(choices=[(k, v[0]) for k, v in VM_SIZES.items()], initial="small")
    lease_hours = forms.DecimalField(label="Lease (hours)", decimal_places=2, initial=Decimal(8))
    public_key = forms.CharField(
        label="SSH public key",
        widget=forms.Textarea(
            attrs={"rows": 2, "placeholder": "ssh-ed25519 AAAA... you@laptop", "spellcheck": "false"}
        ),
        help_text="One OpenSSH public key line; the form remembers your last one.",
    )
    from_addresses = forms.CharField(
        label="Allow logins from", required=False, help_text='Optional, e.g. "10.0.0.0/8,192.168.1.5".'
    )
    group = forms.ChoiceField(label="Team", required=False)

    @classmethod
    def initial_from(cls, w: Workload) -> dict[str, Any]:
        size = next((k for k, (_, g, c, m) in VM_SIZES.items() if (g, c, m) == (w.gpus, w.cpus, w.memory_gb)), "small")
        # Not its SSH key: the page offers the person's own last key (a teammate's lease may be cloned too).
        return super().initial_from(w) | {"size": size, "lease_hours": w.lease_hours or Decimal(8)}

    def clean_public_key(self) -> str:
        key = " ".join(str(self.cleaned_data["public_key"]).split())
        parts = key.split()
        if len(parts) < 2 or not parts[0].startswith(("ssh-", "ecdsa-", "sk-")) or len(key) > 8000:
            raise forms.ValidationError("Give one OpenSSH public key line, e.g. ssh-ed25519 AAAA... you@laptop.")
        return " ".join(parts[:3])

    def clean_from_addresses(self) -> str:
        value = str(self.cleaned_data["from_addresses"]).strip()
        if value and not all(c.isalnum() or c in ".:/,*?-" for c in value):
            raise forms.ValidationError("Give addresses or patterns separated by commas.")
        return value

    def to_request(self) -> SubmitRequest:
        d = self.cleaned_data
        _, gpus, cpus, memory_gb = VM_SIZES[d["size"]]
        lease = d["lease_hours"]
        return SubmitRequest(
            queue=d["queue"],
            kind="vm",
            name=d["name"],
            gpus=gpus,
            cpus=cpus,
            memory_gb=memory_gb,
            runtime_limit_minutes=max(1, int(lease * 60)) if lease > 0 else None,
            lease_hours=lease,
            group=d["group"] or None,
        )


FORM_OF_KIND: dict[str, type[TrainingForm | NotebookForm | VMForm]] = {
    "training": TrainingForm,
    "batch": TrainingForm,
    "notebook": NotebookForm,
    "vm": VMForm,
}
