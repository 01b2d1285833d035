"""Service identities for AI agents and pipelines: created, changed and disabled by their team's leads or IT."""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.db import transaction
from django.utils import timezone

from portal.accounts import audit, tokens
from portal.accounts.models import SERVICE_USERNAME_PREFIX, ServiceIdentity


def username_for(name: str) -> str:
    return f"{SERVICE_USERNAME_PREFIX}{name}"


@transaction.atomic
def create(service: ServiceIdentity, name: str, allowed_queues: Any, by: Any) -> tuple[ServiceIdentity, str]:
    """Save a validated, unsaved service identity with its own user row; returns it and its first token."""
    with audit.acting_as(by):
        user = get_user_model().objects.create_user(username_for(name))  # no usable password: tokens only
        service.user = user
        service.created_by = by
        service.save()
        service.allowed_queues.set(allowed_queues)
    _, plaintext = tokens.issue(user, "first token", expires_at=service.expires_at, by=by)
    return service, plaintext


@transaction.atomic
def disable(service: ServiceIdentity, by: Any) -> None:
    """Switch the agent off for good: its tokens are revoked and it can no longer submit."""
    if service.disabled_at is None:
        service.disabled_at = timezone.now()
        with audit.acting_as(by):
            service.save(update_fields=["disabled_at"])
    for token in service.user.api_tokens.filter(revoked_at__isnull=True):
        tokens.revoke(token, by)
