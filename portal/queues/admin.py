from __future__ import annotations

from decimal import Decimal
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import ValidationError
from django.db.models import Count, Q, QuerySet
from django.http import HttpRequest
from django.utils import timezone

from fabrics.registry import KINDS
from portal import words
from portal.queues import grants
from portal.queues.models import (
    Fabric,
    PriorityTier,
    Profile,
    Queue,
    QueueTarget,
    Quota,
    QuotaGrant,
    WorkloadKind,
    nesting_errors,
)


class FabricForm(forms.ModelForm[Fabric]):
    kind = forms.ChoiceField(choices=lambda: [(k, k) for k in sorted(KINDS)])

    class Meta:
        model = Fabric
        fields = ["name", "kind", "enabled", "gpu_flavor", "gpus_milli", "cpus_milli", "memory_mib", "gpu_sharing",
                  "gpu_hour_price", "cpu_hour_price", "memory_gb_hour_price", "settings"]  # fmt: skip


class QueueTargetInline(admin.TabularInline[QueueTarget, Queue]):
    model = QueueTarget
    extra = 1
    ordering = ["order"]


class QueueForm(forms.ModelForm[Queue]):
    """Kinds of work as checkboxes, not a JSON list; "teams", as everywhere else in Gridlane."""

    kinds = forms.MultipleChoiceField(
        choices=[(k, words.kind_label(k)) for k in WorkloadKind.values],
        widget=forms.CheckboxSelectMultiple,
        help_text="The kinds of work people may send to this queue.",
    )

    class Meta:
        model = Queue
        fields = ["name", "slug", "description", "kinds", "allowed_groups", "default_runtime_minutes",
                  "max_runtime_minutes", "preemptible", "gpu_share_percent", "notebook_idle_minutes", "gpu_idle_action",
                  "gpu_idle_grace_minutes", "pullback_patience_seconds", "enabled"]  # fmt: skip
        labels = {"allowed_groups": "Teams that may use it"}
        help_texts = {"allowed_groups": "A queue open to no team is visible to nobody but IT."}

    # What a queue does about idle GPUs came later than the rest: a form posted without it (a script, an older
    # page) keeps the defaults, nothing and 30 minutes, rather than failing.
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for name in ("gpu_idle_action", "gpu_idle_grace_minutes"):
            self.fields[name].required = False

    def clean_gpu_idle_action(self) -> str:
        return str(self.cleaned_data.get("gpu_idle_action") or Queue.GpuIdleAction.NOTHING)

    def clean_gpu_idle_grace_minutes(self) -> int:
        minutes = self.cleaned_data.get("gpu_idle_grace_minutes")
        return int(minutes) if minutes is not None else 30


def queue_warnings(queue: Queue, fabrics: int, teams: int) -> list[str]:
    """What keeps people from using a queue: nothing serves it, or nobody may see it."""
    found = []
    if not fabrics:
        found.append("no fabric: work sent here cannot run")
    if not teams:
        found.append("open to no team: nobody but IT sees it")
    return found


@admin.register(Queue)
class QueueAdmin(admin.ModelAdmin[Queue]):
    form = QueueForm
    list_display = ["name", "slug", "kinds_in_words", "runtime", "notebook_idle_minutes", "preemptible", "enabled",
                    "warnings"]  # fmt: skip
    list_filter = ["enabled", "preemptible"]
    filter_horizontal = ["allowed_groups"]
    prepopulated_fields = {"slug": ["name"]}
    inlines = [QueueTargetInline]

    def get_queryset(self, request: HttpRequest) -> QuerySet[Queue]:
        return (
            super()
            .get_queryset(request)
            .annotate(
                n_fabrics=Count("targets", filter=Q(targets__fabric__enabled=True), distinct=True),
                n_teams=Count("allowed_groups", distinct=True),
            )
        )

    @admin.display(description="Kinds")
    def kinds_in_words(self, queue: Queue) -> str:
        return ", ".join(words.kind_label(k) for k in queue.kinds)

    @admin.display(description="Runtime")
    def runtime(self, queue: Queue) -> str:
        from portal.words import duration

        most = duration(queue.max_runtime_minutes * 60)
        return f"default {duration(queue.default_runtime_minutes * 60)}, at most {most}"

    @admin.display(description="Warnings")
    def warnings(self, queue: Queue) -> str:
        return "; ".join(queue_warnings(queue, getattr(queue, "n_fabrics", 1), getattr(queue, "n_teams", 1)))

    def save_related(self, request: HttpRequest, form: Any, formsets: Any, change: bool) -> None:
        super().save_related(request, form, formsets, change)
        queue = form.instance
        fabrics = queue.targets.filter(fabric__enabled=True).count()
        for warning in queue_warnings(queue, fabrics, queue.allowed_groups.count()):
            self.message_user(request, f"{queue.name}: {warning}.", messages.WARNING)


# Quotas in the units people use: GPUs (fractions allowed), CPUs and GB; stored in milli-units and MiB.
QUOTA_FIELDS = {  # form field -> (model field, scale, label)
    "gpu_reservation": ("gpu_reservation_milli", 1000, "GPU reservation"),
    "gpu_limit": ("gpu_limit_milli", 1000, "GPU limit"),
    "cpu_reservation": ("cpu_reservation_milli", 1000, "CPU reservation"),
    "cpu_limit": ("cpu_limit_milli", 1000, "CPU limit"),
    "memory_reservation_gb": ("memory_reservation_mib", 1024, "Memory reservation (GB)"),
    "memory_limit_gb": ("memory_limit_mib", 1024, "Memory limit (GB)"),
}


class QuotaForm(forms.ModelForm[Quota]):
    """A team's reservation (a floor) and limit (a cap) in GPUs, CPUs and GB; an empty limit is no cap."""

    gpu_reservation = forms.DecimalField(
        label="GPU reservation",
        min_value=0,
        decimal_places=3,
        initial=0,
        help_text="GPUs guaranteed while the team has work waiting, e.g. 4 or 0.5.",
    )
    gpu_limit = forms.DecimalField(label="GPU limit", min_value=0, decimal_places=3, required=False,
                                   help_text="The most GPUs the team may hold at once; empty: no cap.")  # fmt: skip
    cpu_reservation = forms.DecimalField(label="CPU reservation", min_value=0, decimal_places=3, initial=0)
    cpu_limit = forms.DecimalField(label="CPU limit", min_value=0, decimal_places=3, required=False)
    memory_reservation_gb = forms.DecimalField(label="Memory reservation (GB)", min_value=0, decimal_places=3,
                                               initial=0)  # fmt: skip
    memory_limit_gb = forms.DecimalField(label="Memory limit (GB)", min_value=0, decimal_places=3, required=False)

    class Meta:
        model = Quota
        fields = ["group", "fabric"]
        labels = {"group": "Team", "fabric": "Fabric"}

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.instance.pk:
            for name, (attr, scale, _) in QUOTA_FIELDS.items():
                value = getattr(self.instance, attr)
                self.initial[name] = None if value is None else (Decimal(value) / scale).normalize()

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        values: dict[str, int | None] = {}
        for name, (attr, scale, label) in QUOTA_FIELDS.items():
            value = data.get(name)
            if value is None and "reservation" in name:
                value = Decimal(0)  # a floor of nothing
            if value is not None and (value * scale) != (value * scale).to_integral_value():
                self.add_error(name, f"{label}: at most three decimal places.")
                return data
            values[attr] = None if value is None else int(value * scale)
        for resource, unit in (("gpu", "milli"), ("cpu", "milli"), ("memory", "mib")):
            floor, cap = values[f"{resource}_reservation_{unit}"], values[f"{resource}_limit_{unit}"]
            if cap is not None and floor is not None and cap < floor:
                name = "memory_limit_gb" if resource == "memory" else f"{resource}_limit"
                self.add_error(name, "The limit is below the reservation: a cap cannot sit under the floor.")
                return data
        group = data.get("group")
        if group is not None:
            nesting = nesting_errors(
                group, data["fabric"].pk if data.get("fabric") else self.instance.fabric_id,
                values["gpu_reservation_milli"] or 0,
                values["gpu_limit_milli"], self.instance.pk,
            )  # fmt: skip
            for which, message in nesting.items():
                self.add_error(f"gpu_{which}", message)
            if nesting:
                return data
        member_cap = group.member_gpu_limit_milli if group is not None else None
        gpu_cap = values["gpu_limit_milli"]
        if group is not None and member_cap is not None and gpu_cap is not None and gpu_cap < member_cap:
            self.add_error(
                "gpu_limit",
                f"Below what each member of {group.name} may hold ({words.gpus(Decimal(member_cap) / 1000)}): "
                "lower the team's member cap first.",
            )
            return data
        for attr, value in values.items():
            setattr(self.instance, attr, value)
        return data


class QuotaInline(admin.TabularInline[Quota, Fabric]):
    model = Quota
    form = QuotaForm
    extra = 1
    fields = ["group", *QUOTA_FIELDS]
    verbose_name = "team quota"
    verbose_name_plural = "team quotas on this fabric"


@admin.register(Fabric)
class FabricAdmin(admin.ModelAdmin[Fabric]):
    form = FabricForm
    list_display = [
        "name",
        "kind",
        "gpu_flavor",
        "gpus_milli",
        "cpus_milli",
        "memory_mib",
        "gpu_hour_price",
        "enabled",
        "healthy",
    ]
    list_filter = ["kind", "enabled", "healthy"]
    readonly_fields = ["healthy", "health_detail", "how_quotas_hold"]
    inlines = [QuotaInline]

    @admin.display(description="How quotas hold here")
    def how_quotas_hold(self, fabric: Fabric) -> str:
        return quotas_here(fabric.kind, fabric.settings or {})


QUOTAS_EVERYWHERE = (
    "Across all fabrics together: Gridlane counts the team's work on every fabric against this cap when it admits."
)
_HOLD = "Gridlane admits the team's work within the reservation (a floor it gets back by preempting borrowers in "
_HOLD += "preemptible queues) and the limit (a cap), before anything reaches the fabric"
QUOTAS_BY_KIND = {
    "local": _HOLD + "; the local fabric runs only what was admitted.",
    "agent": _HOLD + "; agents claim only admitted work.",
    "slurm": _HOLD + " (sbatch); Slurm's own limits (associations, QOS) still apply on the cluster.",
    "pbs": _HOLD + " (qsub); PBS's own limits still apply on the cluster.",
    "kubernetes": _HOLD + " (the Job).",
}


def quotas_here(kind: str, settings: dict[str, Any]) -> str:
    """What a quota on a fabric of this kind means there, for IT where quotas are set."""
    said = QUOTAS_BY_KIND.get(kind, _HOLD + ".")
    if kind == "kubernetes" and settings.get("kueue_owned"):
        said += " Gridlane also writes each team's quota as its Kueue ClusterQueue (reservation: nominal quota; limit"
        said += " less reservation: borrowing limit), so Kueue holds the same figures."
    return said


@admin.register(Quota)
class QuotaAdmin(admin.ModelAdmin[Quota]):
    form = QuotaForm
    fields = ["group", "fabric", *QUOTA_FIELDS, "how_it_holds"]
    readonly_fields = ["how_it_holds"]
    list_display = ["group", "where", "gpus", "cpus", "memory"]
    list_filter = ["fabric", "group"]

    @admin.display(description="How it holds")
    def how_it_holds(self, quota: Quota) -> str:
        if quota.pk is None:
            return "Pick a fabric and save: this says how that fabric's kind holds the quota."
        if quota.fabric is None:
            return QUOTAS_EVERYWHERE
        return quotas_here(quota.fabric.kind, quota.fabric.settings or {})

    @admin.display(description="Fabric")
    def where(self, quota: Quota) -> str:
        return str(quota.fabric) if quota.fabric else "all fabrics (a team-wide cap)"

    @admin.display(description="GPUs (reservation / limit)")
    def gpus(self, quota: Quota) -> str:
        return _pair(quota.gpu_reservation_milli, quota.gpu_limit_milli, 1000)

    @admin.display(description="CPUs (reservation / limit)")
    def cpus(self, quota: Quota) -> str:
        return _pair(quota.cpu_reservation_milli, quota.cpu_limit_milli, 1000)

    @admin.display(description="Memory GB (reservation / limit)")
    def memory(self, quota: Quota) -> str:
        return _pair(quota.memory_reservation_mib, quota.memory_limit_mib, 1024)


@admin.register(QuotaGrant)
class QuotaGrantAdmin(admin.ModelAdmin[QuotaGrant]):
    """Temporary grants. IT decides asks here or on its Temporary grants page; an overlapping grant of the same
    team and fabric is refused with the model's error, nothing saved. Decisions are read-only: the actions
    below make them, through the same service as the page, so each is audited once."""

    fields = ["team", "fabric", "gpus_milli", "starts_at", "ends_at", "reason", "state", "requested_by",
              "requested_at", "decided_by", "decided_at", "decision_note"]  # fmt: skip
    readonly_fields = ["state", "requested_by", "requested_at", "decided_by", "decided_at", "decision_note"]
    list_display = ["team", "fabric", "gpus", "starts_at", "ends_at", "state", "requested_by", "decided_by"]
    list_filter = ["state", "fabric", "team"]
    actions = ["approve", "decline"]

    @admin.display(description="Extra GPUs")
    def gpus(self, grant: QuotaGrant) -> str:
        return words.number(grant.gpus_milli / 1000)

    def save_model(self, request: HttpRequest, obj: QuotaGrant, form: Any, change: bool) -> None:
        if not change and obj.requested_by_id is None:
            obj.requested_by = request.user  # type: ignore[assignment]
        super().save_model(request, obj, form, change)

    def _decide(self, request: HttpRequest, queryset: QuerySet[QuotaGrant], approve: bool) -> None:
        done = 0
        for grant in queryset.select_related("team", "fabric"):
            try:
                grants.check_decide(grant, approve)
            except ValidationError as error:
                self.message_user(request, f"{grant}: {' '.join(error.messages)}", messages.ERROR)
                continue
            done += grants.do_decide(request.user, grant, approve, "", timezone.now())
        self.message_user(request, f"{'Approved' if approve else 'Declined'} {done}.", messages.SUCCESS)

    @admin.action(description="Approve the selected asks")
    def approve(self, request: HttpRequest, queryset: QuerySet[QuotaGrant]) -> None:
        self._decide(request, queryset, True)

    @admin.action(description="Decline the selected asks")
    def decline(self, request: HttpRequest, queryset: QuerySet[QuotaGrant]) -> None:
        self._decide(request, queryset, False)


def _pair(reservation: int, limit: int | None, scale: int) -> str:
    cap = "no cap" if limit is None else words.number(limit / scale)
    return f"{words.number(reservation / scale)} / {cap}"


class ProfileForm(forms.ModelForm[Profile]):
    """A profile in the units people use: GPUs (fractions allowed), CPUs and GB; kinds as checkboxes."""

    kinds = forms.MultipleChoiceField(
        choices=[(k, words.kind_label(k)) for k in WorkloadKind.values],
        widget=forms.CheckboxSelectMultiple,
        help_text="The forms that offer it.",
    )
    gpus = forms.DecimalField(label="GPUs", min_value=0, max_value=1024, decimal_places=3, initial=1,
                              help_text="Per node; fractions below one share a GPU, e.g. 0.25.")  # fmt: skip
    cpus = forms.DecimalField(label="CPUs", min_value=Decimal("0.001"), max_value=100_000, decimal_places=3, initial=8)
    memory_gb = forms.DecimalField(label="Memory (GB)", min_value=Decimal("0.001"), max_value=1_000_000,
                                   decimal_places=3, initial=64)  # fmt: skip

    class Meta:
        model = Profile
        fields = ["name", "description", "kinds", "queues", "hours", "order", "enabled"]
        labels = {"hours": "Hours"}

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.instance.pk:
            self.initial.update(
                gpus=self.instance.gpus.normalize(),
                cpus=self.instance.cpus.normalize(),
                memory_gb=self.instance.memory_gb,
            )

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        if data.get("gpus") is not None:
            self.instance.gpus_milli = int(data["gpus"] * 1000)
        if data.get("cpus") is not None:
            self.instance.cpus_milli = int(data["cpus"] * 1000)
        if data.get("memory_gb") is not None:
            self.instance.memory_mib = max(1, int(data["memory_gb"] * 1024))
        queues, kinds = data.get("queues"), set(data.get("kinds") or ())
        if queues and kinds and not any(kinds & set(q.kinds) for q in queues):
            self.add_error("queues", "None of these queues takes these kinds of work: no form would offer it.")
        return data


@admin.register(Profile)
class ProfileAdmin(admin.ModelAdmin[Profile]):
    """IT's ready-made sizes, offered first on the submit forms."""

    form = ProfileForm
    fields = ["name", "description", "kinds", "gpus", "cpus", "memory_gb", "hours", "queues", "order", "enabled"]
    list_display = ["name", "size", "kinds_in_words", "where", "order", "enabled"]
    list_editable = ["order", "enabled"]
    filter_horizontal = ["queues"]

    def get_queryset(self, request: HttpRequest) -> QuerySet[Profile]:
        return super().get_queryset(request).prefetch_related("queues")

    @admin.display(description="Size")
    def size(self, profile: Profile) -> str:
        return profile.summary()

    @admin.display(description="Kinds")
    def kinds_in_words(self, profile: Profile) -> str:
        return ", ".join(words.kind_label(k) for k in profile.kinds)

    @admin.display(description="Queues")
    def where(self, profile: Profile) -> str:
        return ", ".join(q.name for q in profile.queues.all()) or "every queue for its kinds"


class PriorityTierForm(forms.ModelForm[PriorityTier]):
    """A tier nobody may use is refused, and its slug stays what submitted work names once it exists."""

    class Meta:
        model = PriorityTier
        fields = ["name", "slug", "description", "weight", "may_preempt", "open_to_all", "allowed_groups",
                  "leads_only", "order", "slurm_qos", "slurm_nice", "pbs_priority",
                  "kubernetes_priority_class"]  # fmt: skip
        labels = {"allowed_groups": "Teams that may use it"}
        help_texts = {"allowed_groups": "Or tick Every team above."}

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        if not data.get("open_to_all") and not data.get("allowed_groups") and "allowed_groups" not in self.errors:
            self.add_error(
                "allowed_groups",
                "Nobody could use this tier: choose the teams that may, or tick Every team.",
            )
        return data


@admin.register(PriorityTier)
class PriorityTierAdmin(admin.ModelAdmin[PriorityTier]):
    """IT's priority tiers (audited like queues). One still named by work that has not ended is not deleted."""

    form = PriorityTierForm
    list_display = ["name", "slug", "weight", "may_preempt", "who", "on_fabrics", "order"]
    list_filter = ["may_preempt", "open_to_all", "leads_only"]
    filter_horizontal = ["allowed_groups"]
    prepopulated_fields = {"slug": ["name"]}

    def get_readonly_fields(self, request: HttpRequest, obj: PriorityTier | None = None) -> list[str]:
        return ["slug"] if obj is not None else []

    def get_prepopulated_fields(self, request: HttpRequest, obj: PriorityTier | None = None) -> dict[str, Any]:
        return {} if obj is not None else dict(self.prepopulated_fields)

    @admin.display(description="Who may use it")
    def who(self, tier: PriorityTier) -> str:
        teams = "every team" if tier.open_to_all else ", ".join(g.slug for g in tier.allowed_groups.all())
        return f"{teams} (leads only)" if tier.leads_only else teams

    @admin.display(description="On fabrics")
    def on_fabrics(self, tier: PriorityTier) -> str:
        said = [
            f"Slurm QOS {tier.slurm_qos}" if tier.slurm_qos else "",
            f"Slurm nice {tier.slurm_nice}" if tier.slurm_nice is not None else "",
            f"PBS priority {tier.pbs_priority}" if tier.pbs_priority is not None else "",
            f"PriorityClass {tier.kubernetes_priority_class}" if tier.kubernetes_priority_class else "",
        ]
        return ", ".join(s for s in said if s) or "-"

    def get_queryset(self, request: HttpRequest) -> QuerySet[PriorityTier]:
        return super().get_queryset(request).prefetch_related("allowed_groups")

    def get_deleted_objects(self, objs: Any, request: HttpRequest) -> tuple[Any, Any, Any, Any]:
        """A tier still named by work that has not ended is protected: the admin refuses to delete it."""
        deleted, counts, permissions, protected = super().get_deleted_objects(objs, request)
        protected = list(protected)
        for tier in objs:
            n = unfinished_work(tier.slug)
            if n:
                protected.append(f"{tier.name}: {n} workload{'s' if n != 1 else ''} at this tier that ha"
                                 f"{'ve' if n != 1 else 's'} not ended (move them to another tier first)")  # fmt: skip
        return deleted, counts, permissions, protected


def unfinished_work(tier: str) -> int:
    """How many workloads that have not ended are at this tier (which keeps it from being deleted)."""
    from portal.workloads.models import Workload  # the admin, above both apps, asks the workloads
    from portal.workloads.states import FINISHED

    return Workload.objects.filter(priority=tier).exclude(state__in=FINISHED).count()
