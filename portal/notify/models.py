"""A person's notification settings, and the outbox of what is to be sent (one row per message and channel)."""

from __future__ import annotations

from typing import Any, ClassVar

from django.conf import settings
from django.db import models
from django.utils import timezone


class Event(models.TextChoices):
    STARTED = "started", "Started"
    FINISHED = "finished", "Finished"
    FAILED = "failed", "Failed or expired"
    IDLE = "idle", "Idle warning"
    LEASE = "lease", "Lease ending"
    OBJECTIVE = "objective", "Wait objective burning"  # to leads and IT by their role, not chosen
    BUDGET = "budget", "Budget thresholds (leads)"
    GRANT = "grant", "My team's grant is decided (leads)"
    TEAM_IDLE = "team_idle", "My team's GPUs sit idle (leads)"
    TEAM_LIMIT = "team_limit", "My team's work waits at its limit (leads)"
    TEST = "test", "A test message"


# What a person may choose to hear of (the preference form's choices): their own work, a budget's thresholds
# (theirs, or their team's for a lead) and a lead's team events. Objectives go to people by their role, and a
# test message is sent when asked for.
WORK_EVENTS = tuple(e for e in Event if e not in (Event.OBJECTIVE, Event.TEST))


def every_event() -> list[str]:
    return [e for e in Event.values if e != Event.TEST]  # a test is sent when asked for, whatever one hears


class Preference(models.Model):
    """What a person wants to hear about, and where: e-mail (Django's mail settings) and a webhook that takes
    Slack- or Teams-style JSON (`{"text": ...}`). Off until they turn it on."""

    user = models.OneToOneField(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="notify_preference")
    email = models.BooleanField("E-mail me", default=False)
    email_to = models.EmailField("E-mail address", blank=True, help_text="Empty: the address your sign-in gives.")
    webhook_url = models.URLField(
        "Webhook URL",
        max_length=500,
        blank=True,
        help_text="A Slack or Teams incoming webhook, or any that takes JSON.",
    )
    events = models.JSONField(default=every_event)
    updated_at = models.DateTimeField(default=timezone.now)

    def __str__(self) -> str:
        return f"notifications of {self.user}"

    def channels(self) -> list[str]:
        found: list[str] = []
        if self.email and self.address():
            found.append(Notification.Channel.EMAIL)
        if self.webhook_url:
            found.append(Notification.Channel.WEBHOOK)
        return found

    def address(self) -> str:
        return self.email_to or str(getattr(self.user, "email", "") or "")


class Notification(models.Model):
    """One message on one channel: pending until sent (or given up after a few tries), with what went wrong."""

    class Channel(models.TextChoices):
        EMAIL = "email", "E-mail"
        WEBHOOK = "webhook", "Webhook"

    class State(models.TextChoices):
        PENDING = "pending"
        SENDING = "sending"  # handed to a sender; back to pending if that sender dies (its lease runs out)
        SENT = "sent"
        FAILED = "failed"  # given up

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="notifications")
    workload = models.ForeignKey(
        "workloads.Workload", null=True, blank=True, on_delete=models.SET_NULL, related_name="notifications"
    )
    event = models.CharField(max_length=10, choices=Event.choices)
    channel = models.CharField(max_length=10, choices=Channel.choices)
    key = models.CharField(max_length=120, help_text="What it is about, once: e.g. the workload event it tells of.")
    subject = models.CharField(max_length=200)
    text = models.TextField()
    url = models.URLField(max_length=500, blank=True)
    state = models.CharField(max_length=10, choices=State.choices, default=State.PENDING)
    attempts = models.PositiveSmallIntegerField(default=0)
    due_at = models.DateTimeField(default=timezone.now)
    created_at = models.DateTimeField(default=timezone.now)
    sent_at = models.DateTimeField(null=True, blank=True)
    error = models.CharField(max_length=300, blank=True)

    class Meta:
        ordering = ["-created_at", "-pk"]
        constraints: ClassVar[list[Any]] = [
            models.UniqueConstraint(fields=["user", "channel", "key"], name="one_notification_per_channel_and_key"),
        ]
        indexes: ClassVar[list[Any]] = [models.Index(fields=["state", "due_at"], name="notify_due")]

    def __str__(self) -> str:
        return f"{self.channel} to {self.user}: {self.subject}"
