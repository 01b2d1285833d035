"""A budget: what a team, a member of a team, or an agent identity may spend in a window, in GPU-hours, money or
both; the worker's budget step (portal.budgets.step) keeps what was spent on the row and holds new work once it is
all spent (held_reason). Validation is in clean() (by field), and who may set what in portal.budgets.services."""

from __future__ import annotations

import calendar
import itertools
from datetime import UTC, date, datetime, time
from decimal import Decimal
from typing import Any, ClassVar

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import MinValueValidator
from django.db import models
from django.db.models import Q
from django.utils import timezone

DEFAULT_THRESHOLDS = (80, 100)
MAX_THRESHOLDS = 5


def default_thresholds() -> list[int]:
    return list(DEFAULT_THRESHOLDS)


class Budget(models.Model):
    class Scope(models.TextChoices):
        TEAM = "team", "the team"
        MEMBER = "member", "a member"
        AGENT = "agent", "an agent identity"

    class Window(models.TextChoices):
        MONTH = "month", "each calendar month (UTC)"
        CUSTOM = "custom", "a custom window"

    team = models.ForeignKey("accounts.ResourceGroup", on_delete=models.CASCADE, related_name="budgets")
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="budgets",
        help_text="A member of the team, or one of its agent identities; empty: the whole team.",
    )
    scope = models.CharField(max_length=10, choices=Scope.choices, default=Scope.TEAM, editable=False)
    gpu_hours = models.DecimalField(
        "GPU-hours", max_digits=12, decimal_places=1, null=True, blank=True,
        validators=[MinValueValidator(Decimal("0.1"))], help_text="Empty: no GPU-hour budget.",
    )  # fmt: skip
    money = models.DecimalField(
        max_digits=14, decimal_places=2, null=True, blank=True, validators=[MinValueValidator(Decimal("0.01"))],
        help_text="In the site's currency, at each fabric's prices (the chargeback's cost). Empty: no money budget.",
    )  # fmt: skip
    window = models.CharField(max_length=10, choices=Window.choices, default=Window.MONTH)
    starts_on = models.DateField(null=True, blank=True, help_text="A custom window's first day (from 00:00 UTC).")
    ends_on = models.DateField(null=True, blank=True, help_text="A custom window's end: the day after its last.")
    thresholds = models.JSONField(
        default=default_thresholds, blank=True,
        help_text="Percentages of the budget at which the team's leads are told, e.g. [80, 100].",
    )  # fmt: skip
    set_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+", editable=False
    )
    updated_at = models.DateTimeField(default=timezone.now, editable=False)
    # -- kept by the worker's budget step ------------------------------------------------------------------
    spent_gpu_hours = models.FloatField(default=0.0, editable=False)
    spent_cost = models.FloatField(default=0.0, editable=False)
    spent_at = models.DateTimeField(null=True, blank=True, editable=False, help_text="When it was last counted.")
    held_reason = models.CharField(max_length=300, blank=True, editable=False, help_text="Non-empty: work waits.")
    alerted_window = models.DateTimeField(null=True, blank=True, editable=False)
    alerted_percent = models.PositiveSmallIntegerField(default=0, editable=False)

    class Meta:
        ordering = ["team__slug", "scope", "user__username"]
        constraints: ClassVar[list[Any]] = [
            models.UniqueConstraint(fields=["team", "user"], name="one_budget_per_member_or_agent"),
            models.UniqueConstraint(fields=["team"], condition=Q(user__isnull=True), name="one_budget_per_team"),
        ]

    def __str__(self) -> str:
        who = self.user.username if self.user_id and self.user else "the team"
        return f"{self.team} budget: {who}"

    # -- the window ---------------------------------------------------------------------------------------
    def window_at(self, now: datetime) -> tuple[datetime, datetime]:
        """[start, end) of the window that counts at `now`: its calendar month, or the custom window."""
        if self.window == self.Window.CUSTOM and self.starts_on and self.ends_on:
            return _midnight(self.starts_on), _midnight(self.ends_on)
        start = datetime(now.year, now.month, 1, tzinfo=UTC)
        end = (
            datetime(now.year + 1, 1, 1, tzinfo=UTC)
            if now.month == 12
            else datetime(now.year, now.month + 1, 1, tzinfo=UTC)
        )
        return start, end

    def window_label(self, now: datetime) -> str:
        if self.window == self.Window.CUSTOM and self.starts_on and self.ends_on:
            return f"{self.starts_on:%Y-%m-%d} to {self.ends_on:%Y-%m-%d}"
        return f"{calendar.month_name[now.month]} {now.year}"

    # -- validation -------------------------------------------------------------------------------------
    def clean(self) -> None:
        errors: dict[str, list[str]] = {}
        if self.gpu_hours is None and self.money is None:
            errors.setdefault("gpu_hours", []).append("Set GPU-hours, money or both.")
        if self.window == self.Window.CUSTOM:
            if self.starts_on is None:
                errors.setdefault("starts_on", []).append("A custom window needs its first day.")
            if self.ends_on is None:
                errors.setdefault("ends_on", []).append("A custom window needs its end.")
            elif self.starts_on is not None and self.ends_on <= self.starts_on:
                errors.setdefault("ends_on", []).append("The end must come after the first day.")
        else:
            for name in ("starts_on", "ends_on"):
                if getattr(self, name) is not None:
                    errors.setdefault(name, []).append("Only a custom window has its own days; leave it empty.")
        problem = threshold_problem(self.thresholds)
        if problem:
            errors.setdefault("thresholds", []).append(problem)
        if self.team_id is not None:
            self._clean_scope(errors)
            if not errors:
                self._clean_nesting(errors)
        if errors:
            raise ValidationError(errors)

    def _clean_scope(self, errors: dict[str, list[str]]) -> None:
        """The scope follows from the user: none (the team), one of its agent identities, or a member."""
        from portal.accounts.models import Membership, ServiceIdentity

        if self.user_id is None:
            self.scope = self.Scope.TEAM
            return
        agent = ServiceIdentity.objects.filter(user_id=self.user_id).values_list("group_id", flat=True).first()
        if agent is not None:
            self.scope = self.Scope.AGENT
            if agent != self.team_id:
                errors.setdefault("user", []).append("This agent identity belongs to another team.")
            return
        self.scope = self.Scope.MEMBER
        if not Membership.objects.filter(user_id=self.user_id, group_id=self.team_id).exists():
            errors.setdefault("user", []).append("Not a member of this team.")

    def _clean_nesting(self, errors: dict[str, list[str]]) -> None:
        """A member's or agent's budget stays within the team's, and the team's above each of theirs."""
        others = Budget.objects.filter(team_id=self.team_id).exclude(pk=self.pk)
        if self.user_id is None:
            for other in others.exclude(user__isnull=True).select_related("user"):
                for name, unit in (("gpu_hours", "GPU-hours"), ("money", "")):
                    mine, theirs = getattr(self, name), getattr(other, name)
                    if mine is not None and theirs is not None and theirs > mine:
                        who = other.user.username if other.user else ""
                        errors.setdefault(name, []).append(
                            f"Below {who}'s budget of {amount(theirs, unit)}: lower that first."
                        )
            return
        team = others.filter(user__isnull=True).first()
        if team is None:
            return
        for name, unit in (("gpu_hours", "GPU-hours"), ("money", "")):
            mine, cap = getattr(self, name), getattr(team, name)
            if mine is not None and cap is not None and mine > cap:
                errors.setdefault(name, []).append(f"Above the team's budget of {amount(cap, unit)}.")


def threshold_problem(value: Any) -> str:
    """Why a list of alert thresholds is wrong, or "" when it is right: 1 to 5 whole percentages from 1 to 100,
    each larger than the one before."""
    if not isinstance(value, list) or not value or len(value) > MAX_THRESHOLDS:
        return f"Give 1 to {MAX_THRESHOLDS} percentages, e.g. [80, 100]."
    if not all(isinstance(v, int) and not isinstance(v, bool) and 1 <= v <= 100 for v in value):
        return "Each threshold is a whole percentage from 1 to 100."
    if any(b <= a for a, b in itertools.pairwise(value)):
        return "Give the thresholds from the lowest up, each once."
    return ""


def amount(value: Decimal | float, unit: str) -> str:
    """ "1,000 GPU-hours", "1,234.50 EUR" (the site's currency; none named: the number alone)."""
    if unit:
        return f"{float(value):,.6g} {unit}" if float(value) < 1e6 else f"{float(value):,.0f} {unit}"
    currency = settings.GRIDLANE_CURRENCY
    return f"{float(value):,.2f}" + (f" {currency}" if currency else "")


def _midnight(day: date) -> datetime:
    return datetime.combine(day, time.min, tzinfo=UTC)
