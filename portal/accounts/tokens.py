"""Issuing, revoking and noticing the use of API tokens, each recorded in the audit log."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from django.db import connection
from django.http import HttpRequest
from django.utils import timezone

from portal import sql
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


def use_due(token: ApiToken, now: datetime) -> bool:
    """Whether a use of the token now is to be recorded (note_use): none recorded in the last minute."""
    return token.last_used_at is None or now - token.last_used_at > LAST_USED_RESOLUTION


def note_use(token: ApiToken, request: HttpRequest) -> None:
    """Record the token's use: its last-used time and an audit event, at most once a minute per token.

    The audit of token use is sampled this way rather than one row per request. The write is a
    compare-and-swap on the time the lookup read, so web processes serving the same token at once record one
    use between them; on PostgreSQL the update and the audit event are one statement.
    """
    now = timezone.now()
    seen = token.last_used_at
    if not use_due(token, now):
        return
    event = audit.build(
        "token.used",
        label(token),
        actor=token.user,
        method=request.method,
        path=request.path,
        ip=audit.client_ip(request),
    )
    same = ApiToken.objects.filter(pk=token.pk, last_used_at=seen)
    if connection.vendor == "postgresql":
        table = connection.ops.quote_name(ApiToken._meta.db_table)
        insert, params = sql.insert_select_sql(event, "u")
        with connection.cursor() as cursor:
            cursor.execute(
                f"WITH u AS (UPDATE {table} SET last_used_at = %s WHERE id = %s "  # noqa: S608 (our table)
                f"AND last_used_at IS NOT DISTINCT FROM %s RETURNING 1) {insert} RETURNING 1",
                [now, token.pk, seen, *params],
            )
            won = cursor.fetchone() is not None
    else:
        won = bool(same.update(last_used_at=now))
        if won:
            event.save(force_insert=True)
    if won:
        token.last_used_at = now
