from __future__ import annotations

import hashlib
import secrets
from datetime import datetime
from typing import Any, ClassVar

from django.conf import settings
from django.core.validators import MinValueValidator
from django.db import models
from django.utils import timezone


class ResourceGroup(models.Model):
    """A team or department: the unit that owns quotas and sees its own work."""

    slug = models.SlugField(unique=True)
    name = models.CharField(max_length=100)
    parent = models.ForeignKey("self", null=True, blank=True, on_delete=models.PROTECT, related_name="children")
    oidc_group = models.CharField(
        max_length=200,
        blank=True,
        help_text="The value of the identity provider's groups claim that means this team.",
    )
    fair_share_weight = models.PositiveIntegerField(default=1, validators=[MinValueValidator(1)])
    wait_slo_seconds = models.PositiveIntegerField(
        default=3600, help_text="The team's p95 queue-wait objective, in seconds."
    )

    class Meta:
        ordering = ["slug"]

    def __str__(self) -> str:
        return self.name


class Membership(models.Model):
    class Role(models.TextChoices):
        MEMBER = "member"
        LEAD = "lead"

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships")
    group = models.ForeignKey(ResourceGroup, on_delete=models.CASCADE, related_name="memberships")
    role = models.CharField(max_length=10, choices=Role.choices, default=Role.MEMBER)

    class Meta:
        constraints: ClassVar[list[Any]] = [
            models.UniqueConstraint(fields=["user", "group"], name="one_membership_per_group")
        ]

    def __str__(self) -> str:
        return f"{self.user} in {self.group} ({self.role})"


TOKEN_PREFIX = "glt_"  # noqa: S105 (a public prefix that lets scanners spot leaked tokens)


def _digest(plaintext: str) -> str:
    # Tokens carry 256 random bits, so one fast hash is enough; a slow KDF would only slow every request.
    return hashlib.sha256(plaintext.encode()).hexdigest()


class ApiToken(models.Model):
    """A bearer token, stored as its SHA-256 digest: the plaintext is shown once and never kept."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens")
    name = models.CharField(max_length=100)
    digest = models.CharField(max_length=64, unique=True, editable=False)
    hint = models.CharField(max_length=12, editable=False, help_text="The first characters, to tell tokens apart.")
    created_at = models.DateTimeField(default=timezone.now, editable=False)
    last_used_at = models.DateTimeField(null=True, blank=True, editable=False)
    expires_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.name} ({self.hint}…)"

    @classmethod
    def issue(cls, user: Any, name: str, expires_at: datetime | None = None) -> tuple[ApiToken, str]:
        plaintext = TOKEN_PREFIX + secrets.token_urlsafe(32)
        token = cls.objects.create(
            user=user, name=name, digest=_digest(plaintext), hint=plaintext[:12], expires_at=expires_at
        )
        return token, plaintext

    @classmethod
    def lookup(cls, plaintext: str) -> ApiToken | None:
        """The live token for this plaintext, or None when it is unknown, revoked or expired."""
        if not plaintext.startswith(TOKEN_PREFIX):
            return None
        token = cls.objects.select_related("user").filter(digest=_digest(plaintext)).first()
        if token is None or token.revoked_at is not None:
            return None
        if token.expires_at is not None and token.expires_at <= timezone.now():
            return None
        return token


class AuditEvent(models.Model):
    """Something worth knowing later: a sign-in, a token issued, a policy changed."""

    at = models.DateTimeField(default=timezone.now, db_index=True)
    actor = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)
    action = models.CharField(max_length=60, db_index=True)
    target = models.CharField(max_length=200, blank=True)
    detail = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["-at"]

    def __str__(self) -> str:
        return f"{self.at:%Y-%m-%d %H:%M} {self.action} {self.target}"
