from __future__ import annotations

from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any, ClassVar

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator, RegexValidator
from django.db import models
from django.utils import timezone

from fabrics import native
from fabrics.base import FabricConfig, Resources, TemplateError
from fabrics.registry import KINDS, fabric_class
from portal import words
from portal.accounts.models import ResourceGroup


class WorkloadKind(models.TextChoices):
    NOTEBOOK = "notebook"
    TRAINING = "training"
    BATCH = "batch"
    VM = "vm"


def validate_kinds(value: Any) -> None:
    allowed = set(WorkloadKind.values)
    if not isinstance(value, list) or not value or not all(k in allowed for k in value):
        raise ValidationError(f"Give a non-empty list drawn from: {', '.join(WorkloadKind.values)}.")


class Fabric(models.Model):
    """A place where work runs, with the capacity IT declares for it."""

    name = models.SlugField(unique=True)
    # No `choices` here: the kinds come from fabrics.registry, and a new kind should need no migration.
    kind = models.CharField(max_length=20, help_text="local, slurm, pbs, kubernetes or agent")
    enabled = models.BooleanField(default=True)
    gpu_flavor = models.CharField(max_length=40, blank=True, help_text="e.g. h100, a100-80g, mig-1g.10gb")
    gpus_milli = models.PositiveIntegerField("GPUs (milli)", default=0, help_text="1000 = one GPU.")
    cpus_milli = models.PositiveIntegerField("CPUs (milli)", default=0, help_text="1000 = one CPU.")
    memory_mib = models.PositiveBigIntegerField("Memory (MiB)", default=0)
    gpu_sharing = models.BooleanField(
        default=True,
        help_text="Fractions of a GPU share one GPU here (MIG, time slicing). Off: a fraction takes a whole GPU.",
    )
    settings = models.JSONField(default=dict, blank=True, help_text="Connection settings for this kind of fabric.")
    gpu_hour_price = models.DecimalField(
        "Price per GPU-hour",
        max_digits=10,
        decimal_places=4,
        null=True,
        blank=True,
        validators=[MinValueValidator(Decimal(0))],
        help_text="What one GPU-hour here costs a team (chargeback, in the site's currency); empty: no price. "
        "Hours already rolled up keep the price they were counted at.",
    )
    # CPUs and memory are priced apart where a site charges for them (a CPU-only partition, a memory-heavy one);
    # an allocation's cost is the sum of its three parts.
    cpu_hour_price = models.DecimalField(
        "Price per CPU-hour",
        max_digits=10,
        decimal_places=4,
        null=True,
        blank=True,
        validators=[MinValueValidator(Decimal(0))],
        help_text="What one CPU-hour here costs a team, beside its GPUs; empty: CPUs are not charged.",
    )
    memory_gb_hour_price = models.DecimalField(
        "Price per GB-hour of memory",
        max_digits=10,
        decimal_places=4,
        null=True,
        blank=True,
        validators=[MinValueValidator(Decimal(0))],
        help_text="What one GB of memory held for an hour here costs a team; empty: memory is not charged.",
    )
    healthy = models.BooleanField(default=True, editable=False)
    health_detail = models.CharField(max_length=300, blank=True, editable=False)
    # What the fabric itself last reported (capacity(): nodes up, agents online), read by the worker every
    # GRIDLANE_CAPACITY_SECONDS; null until it first answers. Planning lowers the declaration to it, never raises it.
    observed_gpus_milli = models.PositiveIntegerField("Observed GPUs (milli)", null=True, editable=False)
    observed_cpus_milli = models.PositiveIntegerField("Observed CPUs (milli)", null=True, editable=False)
    observed_memory_mib = models.PositiveBigIntegerField("Observed memory (MiB)", null=True, editable=False)
    observed_at = models.DateTimeField(null=True, editable=False)
    observed_detail = models.CharField(max_length=300, blank=True, editable=False)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    @property
    def capacity(self) -> Resources:
        """What IT declared: the most Gridlane may hand out here."""
        return Resources(self.gpus_milli, self.cpus_milli, self.memory_mib)

    @property
    def observed(self) -> Resources | None:
        """What the fabric last reported; None before its first answer."""
        if self.observed_at is None:
            return None
        return Resources(self.observed_gpus_milli or 0, self.observed_cpus_milli or 0, self.observed_memory_mib or 0)

    def clean(self) -> None:
        if self.kind not in KINDS:
            raise ValidationError({"kind": f"Choose one of: {', '.join(sorted(KINDS))}."})
        try:
            fabric_class(self.kind).check_settings(self.resolved_settings())
        except ValueError as error:
            raise ValidationError({"settings": str(error)}) from error

    def resolved_settings(self) -> dict[str, Any]:
        """The stored settings with the deployment's defaults filled in."""
        resolved = dict(self.settings or {})
        if self.kind == "local":
            resolved.setdefault("root", str(settings.GRIDLANE_LOCAL_FABRIC_ROOT / self.name))
            # Stand-in GPU readings (fabrics/local/standin.py) in demo mode only, whatever is stored.
            resolved["simulated_gpus"] = bool(settings.DEMO and resolved.get("simulated_gpus"))
        # What the fabric needs to know of the model's own fields (flavor -> GPU resource name, fractions).
        resolved.setdefault("gpu_flavor", self.gpu_flavor)
        resolved.setdefault("gpu_sharing", self.gpu_sharing)
        return resolved

    def to_config(self) -> FabricConfig:
        return FabricConfig(name=self.name, kind=self.kind, capacity=self.capacity, settings=self.resolved_settings())


class Queue(models.Model):
    """Where users submit. What they submit never changes with the fabric behind it."""

    slug = models.SlugField(unique=True)
    name = models.CharField(max_length=100)
    description = models.CharField(max_length=300, blank=True)
    kinds = models.JSONField(default=list, validators=[validate_kinds], help_text='e.g. ["training", "batch"]')
    allowed_groups = models.ManyToManyField(ResourceGroup, blank=True, related_name="queues", verbose_name="teams")
    default_runtime_minutes = models.PositiveIntegerField(default=60, validators=[MinValueValidator(1)])
    max_runtime_minutes = models.PositiveIntegerField(default=7 * 24 * 60, validators=[MinValueValidator(1)])
    preemptible = models.BooleanField(
        default=False, help_text="Work here may be preempted when it borrows another team's reservation."
    )
    gpu_share_percent = models.PositiveSmallIntegerField(
        "GPU share of each fabric (%)",
        null=True,
        blank=True,
        validators=[MinValueValidator(1), MaxValueValidator(100)],
        help_text="At most this share of each target fabric's GPUs may run this queue's work at once "
        "(e.g. 25 for notebooks). Empty: no cap beyond the teams' own.",
    )
    notebook_idle_minutes = models.PositiveIntegerField(
        "Notebook idle limit (minutes)",
        null=True,
        blank=True,
        help_text="Stop notebooks with no kernel or terminal activity for this long, after a warning. "
        "Empty or 0: never.",
    )

    class GpuIdleAction(models.TextChoices):
        NOTHING = "nothing", "nothing"
        WARN = "warn", "warn the owner"
        STOP = "stop", "warn the owner, then stop notebooks and VM leases after the grace"
        PREEMPTIBLE = "preemptible", "warn the owner; a team owed its reservation may preempt it first"

    gpu_idle_action = models.CharField(
        "When GPUs sit idle",
        max_length=12,
        choices=GpuIdleAction.choices,
        default=GpuIdleAction.NOTHING,
        help_text="What the worker does about work whose GPUs average below 80 % over the idle window "
        "(GRIDLANE_IDLE_WINDOW_MINUTES). Work with no utilisation data is never acted on.",
    )
    gpu_idle_grace_minutes = models.PositiveIntegerField(
        "Grace after the idle warning (minutes)",
        default=30,
        validators=[MinValueValidator(1)],
        help_text="With `stop`: how long a warned notebook or VM lease may stay idle before it is stopped. "
        "(With `preemptible` the mark stands from the warning until the GPUs are busy again.)",
    )
    pullback_patience_seconds = models.PositiveIntegerField(
        "Patience in a fabric's own queue (seconds)",
        null=True,
        blank=True,
        help_text="How long work may wait in a fabric's own queue (Slurm's, PBS's, Kueue's) while another target "
        "of this queue could start it now, before Gridlane takes it back and sends it there. Empty: the site's "
        "default (GRIDLANE_PULLBACK_PATIENCE_SECONDS, 300 s).",
    )
    enabled = models.BooleanField(default=True)

    class Meta:
        ordering = ["slug"]

    def __str__(self) -> str:
        return self.name

    def clean(self) -> None:
        if (self.default_runtime_minutes or 0) > (self.max_runtime_minutes or 0) > 0:
            raise ValidationError({"default_runtime_minutes": "The default cannot exceed the maximum."})


class QueueTarget(models.Model):
    """One fabric behind a queue, tried in order, with the script or manifest template for it."""

    queue = models.ForeignKey(Queue, on_delete=models.CASCADE, related_name="targets")
    fabric = models.ForeignKey(Fabric, on_delete=models.PROTECT, related_name="targets")
    order = models.PositiveSmallIntegerField(default=0)
    template = models.TextField(blank=True, help_text="Empty means the fabric's default template.")
    native = models.JSONField(
        "Native scripts",
        default=dict,
        blank=True,
        help_text='Users\' own sbatch/qsub scripts here: {"forced": {"partition": "gpu"}, "forbidden": '
        '["reservation"], "allowed": null, "node": {"gpus": 8, "cpus": 32, "memory_gb": 64}, '
        '"default_mem_per_cpu_mb": 1024, "max_array": 1000} (see fabrics/native.py).',
    )
    runs_scripts = models.BooleanField(
        "Runs batch scripts (local fabric)",
        default=False,
        help_text="A local fabric's target: run users' own sbatch scripts as written on the portal's host, honouring "
        "--time, --job-name, --output and --error and counting the resources they ask for (what one host cannot "
        "honour is refused, naming the line). Slurm and PBS targets always take scripts.",
    )
    directives_allowed = models.JSONField(
        "Directives scripts may also carry",
        default=list,
        blank=True,
        help_text='Beyond those Gridlane reads and counts, e.g. ["partition", "mail-type", "mail-user"] (sbatch\'s '
        "long names; qsub's names in fabrics/pbs/directives.py). Priority, identity, environment, account, QOS, "
        "reservation, the tag and resources Gridlane cannot count are never taken from a script.",
    )

    class Meta:
        ordering = ["queue", "order", "pk"]
        constraints: ClassVar[list[Any]] = [
            models.UniqueConstraint(fields=["queue", "fabric"], name="one_target_per_fabric"),
        ]

    def __str__(self) -> str:
        return f"{self.queue} -> {self.fabric}"

    def takes_scripts(self, dialect: str = "") -> bool:
        """Whether this target runs users' own scripts of this dialect ("slurm", "pbs"; "": a plain script):
        an enabled Slurm or PBS fabric's, or a local one's IT lets run them."""
        kind = self.fabric.kind
        return self.fabric.enabled and kind in native.RUN_BY[dialect] and (kind != "local" or self.runs_scripts)

    def clean(self) -> None:
        if self.fabric_id is None:
            return
        reads = self.fabric.kind in native.KINDS or (self.fabric.kind == "local" and self.runs_scripts)
        if self.runs_scripts and self.fabric.kind != "local":
            raise ValidationError(
                {"runs_scripts": "Only a local fabric's target is told to run scripts: Slurm and PBS ones always do."}
            )
        if self.native:
            if not reads:
                raise ValidationError(
                    {"native": "Only Slurm and PBS targets read batch scripts (and local ones IT lets run scripts); "
                     "a pod template forces what Jobs get."}
                )  # fmt: skip
            try:
                native.Policy.of(self.fabric.kind, self.native)
            except ValueError as error:
                raise ValidationError({"native": str(error)}) from error
        if self.directives_allowed:
            if not reads:
                raise ValidationError({"directives_allowed": "Only Slurm and PBS targets read batch scripts."})
            try:
                native.check_extra(self.fabric.kind, self.directives_allowed)
            except ValueError as error:
                raise ValidationError({"directives_allowed": str(error)}) from error
        if not self.template:
            return
        try:
            fabric_class(self.fabric.kind).check_template(self.template)
        except TemplateError as error:
            raise ValidationError({"template": str(error)}) from error


class Quota(models.Model):
    """A team's policy on one fabric: the floor it is guaranteed and the cap it may not pass."""

    group = models.ForeignKey(ResourceGroup, on_delete=models.CASCADE, related_name="quotas", verbose_name="team")
    fabric = models.ForeignKey(
        Fabric,
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="quotas",
        help_text="Empty: the limit applies to the team's use across all fabrics together.",
    )
    gpu_reservation_milli = models.PositiveIntegerField("GPU reservation (milli)", default=0)
    gpu_limit_milli = models.PositiveIntegerField(
        "GPU limit (milli)", null=True, blank=True, help_text="Empty means no cap beyond the fabric's size."
    )
    cpu_reservation_milli = models.PositiveIntegerField("CPU reservation (milli)", default=0)
    cpu_limit_milli = models.PositiveIntegerField("CPU limit (milli)", null=True, blank=True)
    memory_reservation_mib = models.PositiveBigIntegerField("Memory reservation (MiB)", default=0)
    memory_limit_mib = models.PositiveBigIntegerField("Memory limit (MiB)", null=True, blank=True)

    class Meta:
        ordering = ["group", "fabric"]
        constraints: ClassVar[list[Any]] = [
            models.UniqueConstraint(fields=["group", "fabric"], name="one_quota_per_group_and_fabric"),
            models.UniqueConstraint(
                fields=["group"], condition=models.Q(fabric__isnull=True), name="one_overall_quota_per_group"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.group} on {self.fabric or 'all fabrics'}"

    def clean(self) -> None:
        errors = {}
        for resource in ("gpu", "cpu", "memory"):
            unit = "mib" if resource == "memory" else "milli"
            reservation = getattr(self, f"{resource}_reservation_{unit}") or 0
            limit = getattr(self, f"{resource}_limit_{unit}")
            if limit is not None and limit < reservation:
                errors[f"{resource}_limit_{unit}"] = (
                    f"The limit ({limit}) is below the reservation ({reservation}): a cap cannot sit under the floor."
                )
        if self.group_id:
            for which, message in nesting_errors(
                self.group, self.fabric_id, self.gpu_reservation_milli or 0, self.gpu_limit_milli, self.pk
            ).items():
                errors.setdefault(f"gpu_{which}_milli", message)
        member_cap = self.group.member_gpu_limit_milli if self.group_id else None
        if member_cap is not None and self.gpu_limit_milli is not None and self.gpu_limit_milli < member_cap:
            errors.setdefault(
                "gpu_limit_milli",
                f"The team's members may each hold {member_cap} milli-GPUs: a team limit below one member's cap "
                "would make that cap meaningless. Lower the member cap first.",
            )
        if errors:
            raise ValidationError(errors)

    @property
    def reservation(self) -> Resources:
        return Resources(self.gpu_reservation_milli, self.cpu_reservation_milli, self.memory_reservation_mib)


def nesting_errors(
    group: ResourceGroup, fabric_id: int | None, reservation: int, limit: int | None, pk: int | None
) -> dict[str, str]:
    """What is wrong with a team's GPU reservation and limit on a fabric given its department's (the team's
    parent) and, for a department, its teams': a team's reservation comes out of its department's, so the
    teams' together fit in it, and no team's limit passes its department's. Keys: "reservation", "limit"."""
    errors: dict[str, str] = {}
    where = models.Q(fabric__isnull=True) if fabric_id is None else models.Q(fabric_id=fabric_id)
    parent = group.parent
    if parent is not None:
        above = Quota.objects.filter(where, group=parent).first()
        if above is not None:
            sisters = (
                Quota.objects.filter(where, group__parent=parent)
                .exclude(pk=pk or 0)
                .aggregate(total=models.Sum("gpu_reservation_milli"))["total"]
                or 0
            )
            if sisters + reservation > above.gpu_reservation_milli:
                reserves = words.gpus(from_milli(above.gpu_reservation_milli))
                errors["reservation"] = (
                    f"The department {parent.name} reserves {reserves} here, "
                    f"{from_milli(sisters)} of them for its other teams: a team's reservation comes out of its "
                    "department's."
                )
            if above.gpu_limit_milli is not None and (limit is None or limit > above.gpu_limit_milli):
                most = words.gpus(from_milli(above.gpu_limit_milli))
                errors["limit"] = f"Above the department {parent.name}'s limit here ({most})."
    below = Quota.objects.filter(where, group__parent=group)
    if below.exists():
        teams = below.aggregate(total=models.Sum("gpu_reservation_milli"), most=models.Max("gpu_limit_milli"))
        if (teams["total"] or 0) > reservation:
            errors.setdefault(
                "reservation",
                f"Its teams reserve {words.gpus(from_milli(teams['total']))} here between them: the department's "
                "reservation holds theirs.",
            )
        unlimited = below.filter(gpu_limit_milli__isnull=True).exists()
        if limit is not None and (unlimited or (teams["most"] or 0) > limit):
            errors.setdefault("limit", "Below the limit of one of its teams here: lower theirs first.")
    return errors


GRANT_MAX_DAYS = 90  # the longest a temporary grant may run; longer needs is a quota change


class QuotaGrant(models.Model):
    """A temporary increase of a team's GPU reservation and limit on one fabric: asked for by a lead, decided by
    IT (or approved at once where it fits in the department's unused reservation, portal/queues/grants.py).

    An approved grant counts while now is in [starts_at, ends_at): the worker's snapshot adds it to the team's
    quota there (portal/worker/snapshot.py), so it starts and ends on its own, with no step to run."""

    class State(models.TextChoices):
        REQUESTED = "requested"
        APPROVED = "approved"
        DECLINED = "declined"
        WITHDRAWN = "withdrawn"

    LIVE: ClassVar[tuple[str, ...]] = (State.REQUESTED, State.APPROVED)  # may not overlap another live grant

    team = models.ForeignKey(ResourceGroup, on_delete=models.CASCADE, related_name="grants")
    fabric = models.ForeignKey(Fabric, on_delete=models.CASCADE, related_name="grants")
    gpus_milli = models.PositiveIntegerField(
        "Extra GPUs (milli)",
        validators=[MinValueValidator(1)],
        help_text="Added to both the team's reservation and its limit there. 1000 = one GPU.",
    )
    starts_at = models.DateTimeField()
    ends_at = models.DateTimeField()
    reason = models.TextField(max_length=2000)
    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    requested_at = models.DateTimeField(default=timezone.now, editable=False)
    state = models.CharField(max_length=10, choices=State.choices, default=State.REQUESTED, editable=False)
    decided_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+", editable=False
    )
    decided_at = models.DateTimeField(null=True, blank=True, editable=False)
    decision_note = models.CharField(max_length=300, blank=True, editable=False)

    class Meta:
        ordering = ["-starts_at", "-pk"]
        verbose_name = "temporary grant"
        constraints: ClassVar[list[Any]] = [
            models.CheckConstraint(
                condition=models.Q(ends_at__gt=models.F("starts_at")),
                name="grant_ends_after_start",
                violation_error_message="It must end after it starts.",
            ),
            models.CheckConstraint(
                condition=models.Q(gpus_milli__gte=1),
                name="grant_adds_gpus",
                violation_error_message="Ask for more than 0 GPUs.",
            ),
        ]
        indexes: ClassVar[list[Any]] = [models.Index(fields=["state", "ends_at"], name="grant_state_ends")]

    def __str__(self) -> str:
        more = words.gpus(from_milli(self.gpus_milli))
        return f"{self.team} on {self.fabric}: +{more} from {self.starts_at:%Y-%m-%d %H:%M}"

    @property
    def gpus(self) -> Decimal:
        return from_milli(self.gpus_milli)

    def active_at(self, now: datetime) -> bool:
        """Whether it raises the team's quota at `now`: approved, and now within its window."""
        return self.state == self.State.APPROVED and self.starts_at <= now < self.ends_at

    def shown_state(self, now: datetime) -> str:
        """Its state as people read it: an approved grant is "scheduled", "active" or "expired" by the clock."""
        if self.state != self.State.APPROVED:
            return str(self.state)
        if now < self.starts_at:
            return "scheduled"
        return "active" if now < self.ends_at else "expired"

    def clean(self) -> None:
        errors: dict[str, str] = {}
        if self.gpus_milli is not None and self.gpus_milli < 1:
            errors["gpus_milli"] = "Ask for more than 0 GPUs."
        elif self.gpus_milli and self.fabric_id is not None and self.gpus_milli > self.fabric.gpus_milli:
            errors["gpus_milli"] = f"{self.fabric} holds {words.gpus(from_milli(self.fabric.gpus_milli))} in all."
        if self.starts_at is not None and self.ends_at is not None:
            if self.ends_at <= self.starts_at:
                errors["ends_at"] = "It must end after it starts."
            elif self.ends_at - self.starts_at > timedelta(days=GRANT_MAX_DAYS):
                errors["ends_at"] = f"A temporary grant lasts at most {GRANT_MAX_DAYS} days; longer is a quota change."
            elif self._state.adding and self.ends_at <= timezone.now():
                errors["ends_at"] = "It would end in the past."
        if errors:
            raise ValidationError(errors)
        clash = self.overlapping().first()
        if clash is not None:
            raise ValidationError(
                f"{self.team} already has a {clash.state} grant on {self.fabric} from "
                f"{clash.starts_at:%Y-%m-%d %H:%M} to {clash.ends_at:%Y-%m-%d %H:%M} UTC that overlaps this one: "
                "extend or withdraw that one instead."
            )

    def overlapping(self) -> models.QuerySet[QuotaGrant]:
        """Live grants (asked for or approved) of the same team and fabric whose window overlaps this one's;
        none to check while this one is declined or withdrawn, or not filled in enough to say."""
        if self.state not in self.LIVE or None in (self.team_id, self.fabric_id, self.starts_at, self.ends_at):
            return QuotaGrant.objects.none()
        return (
            QuotaGrant.objects.filter(team_id=self.team_id, fabric_id=self.fabric_id, state__in=self.LIVE)
            .filter(starts_at__lt=self.ends_at, ends_at__gt=self.starts_at)
            .exclude(pk=self.pk)
            .order_by("starts_at")
        )


def from_milli(milli: int) -> Decimal:
    """Milli-units (GPUs or CPUs) as people count them: 250 -> 0.25."""
    return Decimal(milli) / 1000


def in_gb(mib: int) -> Decimal:
    """MiB as GB to two places, without trailing zeros: 65536 -> 64."""
    return (Decimal(mib) / 1024).quantize(Decimal("0.01")).normalize()


class Profile(models.Model):
    """A ready-made request IT offers as the first choice on the submit forms ("1 GPU, 8 CPUs, 64 GB, 8 hours"),
    as JupyterHub's profile list does; free numbers stay the second choice."""

    name = models.CharField(max_length=60, unique=True, help_text='What people pick, e.g. "Small GPU".')
    description = models.CharField(max_length=200, blank=True, help_text="A line on what it is good for.")
    kinds = models.JSONField(
        default=list, validators=[validate_kinds], help_text="The kinds of work whose form offers it."
    )
    queues = models.ManyToManyField(
        Queue, blank=True, related_name="profiles", help_text="Empty: every queue that takes its kinds of work."
    )
    gpus_milli = models.PositiveIntegerField("GPUs (milli)", default=0)
    cpus_milli = models.PositiveIntegerField("CPUs (milli)", default=1000, validators=[MinValueValidator(1)])
    memory_mib = models.PositiveBigIntegerField("Memory (MiB)", default=1024, validators=[MinValueValidator(1)])
    hours = models.DecimalField(
        max_digits=7,
        decimal_places=2,
        null=True,
        blank=True,
        validators=[MinValueValidator(Decimal("0.01"))],
        help_text="Runtime limit (training, batch) or lease (notebooks, VMs); empty: the queue's default.",
    )
    order = models.PositiveSmallIntegerField(default=0, help_text="Lower comes first; the first is preselected.")
    enabled = models.BooleanField(default=True)

    class Meta:
        ordering = ["order", "name"]

    def __str__(self) -> str:
        return self.name

    @property
    def gpus(self) -> Decimal:
        return from_milli(self.gpus_milli)

    @property
    def cpus(self) -> Decimal:
        return from_milli(self.cpus_milli)

    @property
    def memory_gb(self) -> Decimal:
        return in_gb(self.memory_mib)

    def summary(self) -> str:
        """What the form shows beside its name: "1 GPU, 8 CPUs, 64 GB, 8 hours"."""
        from portal import words

        text = words.resources(self.gpus, self.cpus, self.memory_gb)
        return f"{text}, {words.hours(float(self.hours * 3600))}" if self.hours else text

    def offered_on(self, queue: Queue) -> bool:
        """Whether this profile may be used on `queue` (needs `queues` prefetched to stay query-free)."""
        chosen = self.queues.all()
        return not chosen or any(q.pk == queue.pk for q in chosen)


class KueueSync(models.Model):
    """How a Kueue-owned Kubernetes fabric's queues stood at the worker's last reconcile (portal/worker/kueue.py)."""

    fabric = models.OneToOneField(Fabric, on_delete=models.CASCADE, primary_key=True, related_name="kueue_sync")
    due = models.BooleanField(default=True, help_text="A quota, a team's department or the fabric changed since.")
    reconciled_at = models.DateTimeField(null=True, blank=True)
    error = models.CharField(max_length=500, blank=True)
    drifted = models.JSONField(default=list, blank=True, help_text="Objects someone else changed or made.")
    report = models.JSONField(default=dict, blank=True)

    def __str__(self) -> str:
        return f"Kueue on {self.fabric_id}"

    @property
    def differences(self) -> list[dict[str, Any]]:
        """What someone else changed, as found before Gridlane put it back."""
        found = self.report.get("differences") or []
        return [d for d in found if d.get("cause") != "changed in Gridlane"]


# The tier a submission gets when it names none (one of the three every site starts with).
DEFAULT_TIER = "normal"
TIER_SLUG_RE = r"^[a-z0-9][a-z0-9-]{0,19}$"
SLURM_QOS_RE = r"^[A-Za-z0-9_.-]+$"  # what sacctmgr accepts as a QOS name, and nothing a shell reads
DNS_SUBDOMAIN_RE = r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$"  # a Kubernetes (Priority)Class name, DNS-1123


class PriorityTier(models.Model):
    """A priority tier IT defines: its weight in the priority formula, whether its work may preempt borrowed work
    of lower tiers, who may use it, and what it asks of fabrics that have priorities of their own.

    A workload names its tier by slug (Workload.priority). A higher weight is a higher tier."""

    slug = models.CharField(
        max_length=20,
        unique=True,
        validators=[
            RegexValidator(
                TIER_SLUG_RE, "Use 1-20 lowercase letters, digits or '-', starting with one of the first two."
            )
        ],
        help_text="What submissions name (--priority, the API's priority); it cannot change once the tier exists.",
    )
    name = models.CharField(max_length=60)
    description = models.CharField(max_length=200, blank=True)
    weight = models.FloatField(
        validators=[MinValueValidator(-100), MaxValueValidator(100)],
        help_text="Q in the priority formula (low 0, normal 1, high 2 to begin with); higher weighs more.",
    )
    may_preempt = models.BooleanField(
        "May preempt borrowed work",
        default=False,
        help_text="Its work, when owed nothing, may preempt work of lower tiers that other teams run on borrowed "
        "capacity in preemptible queues (never below their reservation).",
    )
    open_to_all = models.BooleanField("Every team", default=False, help_text="Every team may use it.")
    allowed_groups = models.ManyToManyField(
        ResourceGroup, blank=True, related_name="priority_tiers", verbose_name="teams"
    )
    leads_only = models.BooleanField(
        "Team leads only",
        default=False,
        help_text="Only a team's leads (and IT) may submit at it or move work into it.",
    )
    order = models.PositiveSmallIntegerField(default=0, help_text="Where it comes in the choices; lower first.")
    slurm_qos = models.CharField(
        "Slurm QOS",
        max_length=64,
        blank=True,
        validators=[RegexValidator(SLURM_QOS_RE, "A Slurm QOS name: letters, digits, '_', '.' or '-'.")],
        help_text="sbatch --qos for its work on Slurm fabrics; empty: the queue's or the account's.",
    )
    slurm_nice = models.IntegerField(
        "Slurm nice",
        null=True,
        blank=True,
        validators=[MinValueValidator(-10000), MaxValueValidator(10000)],
        help_text="sbatch --nice (a positive value lowers the job's priority in Slurm; only Slurm operators may "
        "submit with a negative one).",
    )
    pbs_priority = models.IntegerField(
        "PBS priority",
        null=True,
        blank=True,
        validators=[MinValueValidator(-1024), MaxValueValidator(1023)],
        help_text="qsub -p for its work on PBS fabrics.",
    )
    kubernetes_priority_class = models.CharField(
        "Kubernetes PriorityClass",
        max_length=253,
        blank=True,
        validators=[
            RegexValidator(DNS_SUBDOMAIN_RE, "A Kubernetes object name: lowercase letters, digits, '-' and '.'.")
        ],
        help_text="priorityClassName of its pods (and, in Kueue mode, its WorkloadPriorityClass).",
    )

    class Meta:
        ordering = ["order", "weight", "slug"]
        verbose_name = "priority tier"

    def __str__(self) -> str:
        return self.name
