"""A what-if IT asked for: the last N days of the site's work replayed under a proposed change."""

from __future__ import annotations

from typing import Any, ClassVar

from django.conf import settings
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.urls import reverse
from django.utils import timezone

MAX_DAYS = 90


class WhatIfRun(models.Model):
    class State(models.TextChoices):
        QUEUED = "queued"
        RUNNING = "running"
        DONE = "done"
        FAILED = "failed"

    requested_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    days = models.PositiveSmallIntegerField(validators=[MinValueValidator(1), MaxValueValidator(MAX_DAYS)])
    # One change in scheduler.replay.apply_change's form, e.g. {"capacity": {"fabric": "local", "gpus": 16}};
    # {} replays the current policy only.
    change = models.JSONField(default=dict, blank=True)
    # A wait objective to predict the change's effect on (its work's waits, counted into result["objective"]).
    objective = models.ForeignKey(
        "objectives.WaitObjective", null=True, blank=True, on_delete=models.SET_NULL, related_name="whatifs"
    )
    state = models.CharField(max_length=10, choices=State.choices, default=State.QUEUED)
    progress = models.PositiveSmallIntegerField(default=0)  # percent
    # {"actual": figures, "current": figures, "proposed": figures, "seconds": ...}: scheduler.replay's figures.
    result = models.JSONField(null=True, blank=True)
    error = models.CharField(max_length=500, blank=True)
    created_at = models.DateTimeField(default=timezone.now)  # the replayed window ends here
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering: ClassVar[list[str]] = ["-created_at", "-pk"]
        indexes: ClassVar[list[Any]] = [models.Index(fields=["-created_at"])]

    def __str__(self) -> str:
        return f"what-if {self.pk} ({self.state})"

    def get_absolute_url(self) -> str:
        return reverse("it:whatif-run", args=[self.pk])

    @property
    def busy(self) -> bool:
        return self.state in (self.State.QUEUED, self.State.RUNNING)
