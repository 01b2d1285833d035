"""Issuing, revoking and noticing the use of API tokens, each recorded in the audit log."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from django.http import HttpRequest
from django.utils import timezone

from portal.accounts import audit
from portal.accounts.models import ApiToken

# Recording every use would write on every request; once a minute says enough about "last used".
LAST_USED_RESOLUTION = timedelta(minutes=1)


def label(token: ApiToken) -> str:
    return f"{token.hint}… of {token.user.get_username()}"


def issue(user: Any, name: str, expires_at: datetime | None, by: Any) -> tuple[ApiToken, str]:
    """A new token for `user` (a person, or an agent's user row) and its plaintext, to be shown once."""
    token, plaintext = ApiToken.issue(user, name, expires_at=expires_at, created_by=by)
    audit.record("token.issued", label(token), actor=by, name=name, expires_at=expires_at)
    return token, plaintext


def revoke(token: ApiToken, by: Any) -> bool:
    """Revoke a live token. Returns False, changing nothing, when it was already revoked."""
    now = timezone.now()
    if not ApiToken.objects.filter(pk=token.pk, revoked_at__isnull=True).update(revoked_at=now):
        return False
    token.revoked_at = now
    audit.record("token.revoked", label(token), actor=by, name=token.name)
    return True


def note_use(token: ApiToken, request: HttpRequest) -> None:
    """Record the token's use: its last-used time and an audit event, at most once a minute per token."""
    now = timezone.now()
    if token.last_used_at is not None and now - token.last_used_at <= LAST_USED_RESOLUTION:
        return
    ApiToken.objects.filter(pk=token.pk).update(last_used_at=now)
    token.last_used_at = now
    audit.record(
        "token.used",
        label(token),
        actor=token.user,
        method=request.method,
        path=request.path,
        ip=audit.client_ip(request),
    )
