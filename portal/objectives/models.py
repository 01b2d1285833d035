"""A wait objective: "p95 of the waits under N minutes over M days", for a queue, a priority tier or a team, with
its error budget (the share of work allowed to wait longer than N) and the state of its burn-rate alert."""

from __future__ import annotations

from typing import Any, ClassVar

from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.db.models import Q
from django.urls import reverse
from django.utils import timezone

from portal.usage.waits import THRESHOLDS_MIN

MAX_DAYS = 90


class WaitObjective(models.Model):
    class Kind(models.TextChoices):
        QUEUE = "queue", "A queue"
        TIER = "tier", "A priority tier"
        TEAM = "team", "A team"

    class Alert(models.TextChoices):
        OK = "ok", "Not burning"
        BURNING = "burning", "Burning"

    slug = models.SlugField(unique=True, help_text="Names it in alerts and in /metrics (objective label).")
    name = models.CharField(max_length=100)
    kind = models.CharField(max_length=10, choices=Kind.choices)
    queue = models.ForeignKey("queues.Queue", null=True, blank=True, on_delete=models.CASCADE, related_name="+")
    tier = models.ForeignKey("queues.PriorityTier", null=True, blank=True, on_delete=models.CASCADE, related_name="+")
    team = models.ForeignKey(
        "accounts.ResourceGroup", null=True, blank=True, on_delete=models.CASCADE, related_name="+"
    )
    threshold_minutes = models.PositiveIntegerField(
        "Wait under (minutes)",
        choices=[(m, f"{m} minutes") for m in THRESHOLDS_MIN],
        default=60,
        help_text="N: work should start within this wait.",
    )
    percent = models.FloatField(
        "Share of work (%)",
        default=95.0,
        validators=[MinValueValidator(50.0), MaxValueValidator(99.9)],
        help_text="95: the p95 wait is under N, so 5 % of the work may wait longer (the error budget).",
    )
    days = models.PositiveSmallIntegerField(
        "Over (days)",
        default=28,
        validators=[MinValueValidator(1), MaxValueValidator(MAX_DAYS)],
        help_text="M: the window the objective is measured over.",
    )
    enabled = models.BooleanField(default=True, help_text="Off: neither evaluated nor alerted.")
    alert = models.CharField(max_length=10, choices=Alert.choices, default=Alert.OK)
    alert_since = models.DateTimeField(null=True, blank=True, help_text="When the current burn episode began.")
    evaluated_at = models.DateTimeField(null=True, blank=True)
    # The last evaluation (portal.objectives.burn.Status.as_dict): what /metrics and the list page read.
    status = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering: ClassVar[list[str]] = ["slug"]
        constraints: ClassVar[list[Any]] = [
            models.CheckConstraint(
                condition=(
                    Q(kind="queue", queue__isnull=False, tier__isnull=True, team__isnull=True)
                    | Q(kind="tier", tier__isnull=False, queue__isnull=True, team__isnull=True)
                    | Q(kind="team", team__isnull=False, queue__isnull=True, tier__isnull=True)
                ),
                name="wait_objective_one_scope",
            )
        ]

    def __str__(self) -> str:
        return self.name

    def get_absolute_url(self) -> str:
        return reverse("it:objective", args=[self.slug])

    def clean(self) -> None:
        wanted = {"queue": "queue", "tier": "tier", "team": "team"}.get(str(self.kind))
        errors = {}
        for name in ("queue", "tier", "team"):
            given = getattr(self, f"{name}_id") is not None
            if name == wanted and not given:
                errors[name] = f"Choose the {name} this objective is for."
            elif name != wanted and given:
                errors[name] = f"Only for an objective of a {name}: leave it empty."
        if errors:
            raise ValidationError(errors)

    @property
    def budget(self) -> float:
        """The error budget: the share of work allowed to wait longer than the threshold (0.05 for p95)."""
        return round(1 - self.percent / 100, 6)

    def scope(self) -> Q:
        """Its work, as a filter on wait slices (portal.usage.models.WaitSlice)."""
        if self.kind == self.Kind.QUEUE:
            return Q(queue_id=self.queue_id)
        if self.kind == self.Kind.TIER:
            return Q(tier=self.tier.slug if self.tier else "")
        return Q(group_id=self.team_id)

    def scope_label(self) -> str:
        target = self.queue or self.tier or self.team
        return f"{self.get_kind_display().split(' ', 1)[1]} {target}"

    def words(self) -> str:
        """ "p95 wait under 60 minutes over 28 days"."""
        p = f"{self.percent:g}"
        return f"p{p} wait under {self.threshold_minutes} minutes over {self.days} days"
