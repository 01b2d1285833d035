"""The "New training run" form. It parses types; the rules are the services' (one road for form and API)."""

from __future__ import annotations

from decimal import Decimal
from typing import Any, ClassVar

from django import forms
from django.db.models import Exists, Prefetch, Q

from portal import access, words
from portal.accounts.models import Membership
from portal.queues.models import DEFAULT_TIER, PriorityTier, Profile, QueueTarget
from portal.workloads import gpu_types
from portal.workloads.guide import QueueGuide, queue_guide
from portal.workloads.models import Workload
from portal.workloads.services import SubmitRequest

CUSTOM = "custom"  # the profile choice that means "the numbers below"


class ProfileChoice(forms.RadioSelect):
    """Profiles as radio buttons, each carrying its numbers as data attributes, which the page's script copies
    into the fields it hides (the server takes the profile's own numbers either way)."""

    numbers: dict[str, dict[str, str]]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.numbers = {}

    def create_option(self, name: str, value: Any, *args: Any, **kwargs: Any) -> dict[str, Any]:
        option = super().create_option(name, value, *args, **kwargs)
        option["attrs"].update(self.numbers.get(str(value), {}))
        return option


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
    # The fields an IT-defined profile fills (its resources, then its hours): empty where the form has none.
    profile_fields: ClassVar[tuple[str, ...]] = ()
    hours_field: ClassVar[str] = ""
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
        if "priority" in self.fields:
            self._offer_tiers(user, mine, it)
        self.profiles = self._offer_profiles() if self.profile_fields else {}

    def _offer_tiers(self, user: Any, teams: set[int], it: bool) -> None:
        """The priority tiers any of the user's teams may use (IT: every tier), leads-only ones only where the
        user leads such a team, in IT's order (one query); which of them the chosen team may use is the
        services' check."""
        if it:
            found = PriorityTier.objects.all()
        else:
            # A tier for leads only is offered to those who lead a team that may use it, never to members.
            leads = access.lead_group_ids(user)
            lead_somewhere = Exists(Membership.objects.filter(user=user, role=Membership.Role.LEAD))
            found = PriorityTier.objects.filter(
                Q(leads_only=False, open_to_all=True)
                | Q(leads_only=False, allowed_groups__in=teams)
                | Q(lead_somewhere, leads_only=True, open_to_all=True)
                | Q(leads_only=True, allowed_groups__in=leads)
            ).distinct()
        field = self.fields["priority"]
        assert isinstance(field, forms.ChoiceField)  # noqa: S101 (declared by the subclass)
        field.choices = [(t.slug, f"{t.name} (team leads)" if t.leads_only else t.name) for t in found]

    def _offer_profiles(self) -> dict[str, Profile]:
        """IT's profiles for this form's kinds and queues, as the first field (one query, two when some exist);
        the free numbers become the last choice, "Custom"."""
        found = offered_profiles(self.kinds, self.queue_objects)
        if not found:
            return {}
        widget = ProfileChoice()
        choices = []
        for key, p in found.items():
            said = f" \u2014 {p.description}" if p.description else ""
            choices.append((key, f"{p.name} ({p.summary()}){said}"))
            numbers = {"gpus": p.gpus, "cpus": p.cpus, "memory_gb": p.memory_gb}
            if p.hours and self.hours_field:
                numbers[self.hours_field] = p.hours * 60 if self.hours_field.endswith("minutes") else p.hours
            widget.numbers[key] = {f"data-{k.replace('_', '-')}": words.number(v) for k, v in numbers.items()}
        field = forms.ChoiceField(
            label="Profile",
            choices=[*choices, (CUSTOM, "Custom: the numbers below")],
            widget=widget,
            initial=next(iter(found)),
            required=False,  # a post without it (a script's) gives its own numbers: Custom
            help_text="IT's ready-made sizes; Custom lets you give your own numbers.",
        )
        self.fields = {"profile": field, **self.fields}  # the first choice, shown first
        for name in self.profile_fields:
            self.fields[name].required = False  # required only for Custom (see clean)
        return found

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        if not self.profiles:
            return data
        chosen = data.get("profile")
        if chosen in (CUSTOM, "", None):
            for name in self.profile_fields:
                if data.get(name) is None and name not in self.errors:
                    self.add_error(name, "Give a number, or pick a profile above.")
            return data
        profile = self.profiles[str(chosen)]
        queue = next((q for q in self.queue_objects if q.slug == data.get("queue")), None)
        if queue is not None and not profile.offered_on(queue):
            self.add_error("profile", f"{profile.name} is not offered on {queue.name}; pick another or Custom.")
            return data
        filled: dict[str, Any] = {"gpus": profile.gpus, "cpus": profile.cpus, "memory_gb": profile.memory_gb}
        if "nodes" in self.profile_fields:
            filled["nodes"] = 1
        if self.hours_field and profile.hours:
            minutes = self.hours_field.endswith("minutes")
            filled[self.hours_field] = int(profile.hours * 60) if minutes else profile.hours
        elif self.hours_field and data.get(self.hours_field) is None and self.hours_field not in self.errors:
            self.add_error(self.hours_field, "Give how long, or pick a profile that says it.")
        for name in filled:
            self.errors.pop(name, None)  # the profile's numbers stand in for whatever was typed there
        data |= filled
        return data

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


def offered_profiles(kinds: frozenset[str], queues: list[Any]) -> dict[str, Profile]:
    """The enabled profiles for these kinds of work usable on at least one of these queues, in IT's order."""
    return {
        str(p.pk): p
        for p in Profile.objects.filter(enabled=True).prefetch_related("queues")
        if kinds & set(p.kinds) and any(p.offered_on(q) for q in queues)
    }


class ExtendForm(forms.Form):
    """Extend a notebook's or VM's lease by some hours; how many may be added is the services' rule."""

    hours = forms.DecimalField(label="Extend the lease by (hours)", max_digits=7, decimal_places=2)


class TrainingForm(SubmitForm):
    """Fields parse types only (no ranges here), so every rule is checked, and reported, in one place."""

    kinds = frozenset({"training", "batch"})
    profile_fields = ("gpus", "cpus", "memory_gb", "nodes", "runtime_limit_minutes")
    hours_field = "runtime_limit_minutes"
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
    gpu_type = forms.ChoiceField(label="GPU type", required=False, help_text="Any, or one the queue's fabrics have.")
    cpus = forms.DecimalField(label="CPUs per node", decimal_places=3, initial=Decimal(4))
    memory_gb = forms.DecimalField(label="Memory per node (GB)", decimal_places=3, initial=Decimal(16))
    nodes = forms.IntegerField(initial=1, help_text="More than one runs all nodes together or not at all.")
    runtime_limit_minutes = forms.IntegerField(label="Runtime limit (minutes)", initial=60)
    priority = forms.ChoiceField(initial=DEFAULT_TIER, label="Priority tier")
    group = forms.ChoiceField(label="Team", required=False)

    def __init__(self, *args: Any, user: Any, **kwargs: Any) -> None:
        super().__init__(*args, user=user, **kwargs)
        field = self.fields["gpu_type"]
        assert isinstance(field, forms.ChoiceField)  # noqa: S101 (declared above)
        field.choices = gpu_types.choices(self.queue_objects)

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
            "profile": CUSTOM,  # a copy keeps its own numbers
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
            gpu_type=d.get("gpu_type") or "",
        )


SCRIPT_UPLOAD_BYTES = 256 * 1024


class BatchScriptForm(SubmitForm):
    """A batch script pasted as written (sbatch or qsub): its directives are the request."""

    kinds = frozenset({"training", "batch"})
    queue = forms.ChoiceField()
    kind = forms.ChoiceField(choices=[("batch", "Batch job"), ("training", "Training run")], initial="batch")
    name = forms.CharField(max_length=100, required=False, help_text="Empty: the script's job name.")
    script = forms.CharField(
        label="Batch script",
        strip=False,
        required=False,
        widget=forms.Textarea(
            attrs={"rows": 14, "spellcheck": "false", "placeholder": "#!/bin/bash\n#SBATCH --gpus-per-node=1\n..."}
        ),
        help_text="Submitted byte for byte; its #SBATCH or #PBS lines say what it needs.",
    )
    script_file = forms.FileField(
        label="Or upload it", required=False, help_text="A job file as you would give it to sbatch or qsub."
    )
    array = forms.CharField(max_length=200, required=False, help_text="An array, e.g. 0-99%10 (or --array in it).")

    def script_queues(self) -> list[str]:
        """Names of the offered queues that take sbatch or qsub scripts (an enabled Slurm or PBS target, or a
        local one IT lets run scripts), for the page to say where a script can go; empty when none does."""
        return [q.name for q in self.queue_objects if any(t.takes_scripts() for t in q.targets.all())]

    def clean_script_file(self) -> str:
        """The uploaded script's text: UTF-8, at most SCRIPT_UPLOAD_BYTES ("" when none was given)."""
        upload = self.cleaned_data.get("script_file")
        if not upload:
            return ""
        if upload.size > SCRIPT_UPLOAD_BYTES:
            raise forms.ValidationError(f"A batch script is at most {SCRIPT_UPLOAD_BYTES // 1024} KiB.")
        try:
            return bytes(upload.read()).decode("utf-8")
        except UnicodeDecodeError as error:
            raise forms.ValidationError("This is not a text file (UTF-8): upload the script itself.") from error

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        pasted, uploaded = data.get("script") or "", data.get("script_file") or ""
        if pasted.strip() and uploaded:
            self.add_error("script_file", "Paste the script or upload it, not both.")
        elif not pasted.strip() and not uploaded and "script_file" not in self.errors:
            self.add_error("script", "Paste the script here, or upload it below.")
        data["script"] = pasted if pasted.strip() else uploaded
        return data

    priority = forms.ChoiceField(initial=DEFAULT_TIER, label="Priority tier")
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
    profile_fields = ("gpus", "cpus", "memory_gb", "lease_hours")
    hours_field = "lease_hours"
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
            "profile": CUSTOM,  # a copy keeps its own numbers
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


def _sizes_that_fit(queues: list[Any]) -> dict[str, tuple[str, Decimal, Decimal, Decimal]]:
    """The built-in sizes one of the queues' enabled fabrics can hold (all of them where no fabric is known;
    the smallest where none fits, so that the form still offers one and the submit says why it cannot run)."""
    fabrics = [t.fabric for q in queues for t in q.targets.all() if t.fabric.enabled]
    if not fabrics:
        return dict(VM_SIZES)
    fit = {
        k: v
        for k, v in VM_SIZES.items()
        if any(v[1] * 1000 <= f.gpus_milli and v[2] * 1000 <= f.cpus_milli and v[3] * 1024 <= f.memory_mib
               for f in fabrics)
    }  # fmt: skip
    return fit or dict(list(VM_SIZES.items())[:1])


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
        return super().initial_from(w) | {
            "size": size,
            "resources": (w.gpus, w.cpus, w.memory_gb),  # not a field: finds the same size among IT's profiles
            "lease_hours": w.lease_hours or Decimal(8),
        }

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # IT's VM profiles, where it has defined some, are the sizes on offer; else the built-in ones.
        self.sizes = _sizes_that_fit(self.queue_objects)
        self.profiles = offered_profiles(self.kinds, self.queue_objects)
        if not self.profiles and len(self.sizes) < len(VM_SIZES):
            size = self.fields["size"]
            assert isinstance(size, forms.ChoiceField)  # noqa: S101 (declared above)
            size.choices = [(k, v[0]) for k, v in self.sizes.items()]
            if self.initial.get("size") not in self.sizes:
                self.initial["size"] = next(iter(self.sizes))
        if self.profiles:
            self.sizes = {
                k: (f"{p.name} ({p.summary()})", p.gpus, p.cpus, p.memory_gb) for k, p in self.profiles.items()
            }
            size = self.fields["size"]
            assert isinstance(size, forms.ChoiceField)  # noqa: S101 (declared above)
            size.choices = [(k, v[0]) for k, v in self.sizes.items()]
            size.label = "Profile"
            # A clone or relaunch names a built-in size: the profile of the same size, else the first.
            for values in (self.initial, self.data if isinstance(self.data, dict) else {}):
                if "size" in values and values["size"] not in self.sizes:
                    wanted = values.get("resources")
                    same = (k for k, (_, g, c, m) in self.sizes.items() if (g, c, m) == wanted)
                    values["size"] = next(same, next(iter(self.sizes)))

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        profile = self.profiles.get(str(data.get("size")))
        queue = next((q for q in self.queue_objects if q.slug == data.get("queue")), None)
        if profile is not None and queue is not None and not profile.offered_on(queue):
            self.add_error("size", f"{profile.name} is not offered on {queue.name}; pick another.")
        return data

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
        _, gpus, cpus, memory_gb = self.sizes[d["size"]]
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
