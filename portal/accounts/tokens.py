"""Issuing, revoking and noticing the use of API tokens, each recorded in the audit log."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from django.db import connection
from django.http import HttpRequest
from django.utils import timezone

from portal import access, sql
from portal.accounts import audit, scopes
from portal.accounts.models import ApiToken

# Recording every use would write on every request; once a minute says enough about "last used".
LAST_USED_RESOLUTION = timedelta(minutes=1)


def label(token: ApiToken) -> str:
    return f"{token.hint}… of {token.user.get_username()}"


MAX_CAP_GPU_HOURS = Decimal(1_000_000_000)
MAX_CAP_MONEY = Decimal(1_000_000_000_000)


class ScopeErrors(Exception):
    """Scopes a token may not be given: `errors` maps each field (read_only, actions, queues, cap_gpu_hours,
    cap_money) to
    what is wrong with it."""

    def __init__(self, errors: dict[str, list[str]]) -> None:
        super().__init__(errors)
        self.errors = errors


def check_scopes(
    user: Any,
    read_only: bool = False,
    actions: Sequence[str] | None = None,
    queues: Sequence[str] | None = None,
    cap_gpu_hours: Decimal | None = None,
    cap_money: Decimal | None = None,
) -> dict[str, Any]:
    """The ApiToken fields of these scopes for a token of `user` (ApiToken.issue's `scopes`), or ScopeErrors.

    `actions` None (or, read-only, just "read"): every action; `queues` None or empty: every queue the user may
    use. A token never has more power than its user: each queue must be one the user may use now."""
    errors: dict[str, list[str]] = {}
    if actions is not None:
        unknown = sorted(set(actions) - set(scopes.ACTIONS))
        if unknown:
            errors["actions"] = [f"Unknown actions: {', '.join(unknown)} (choose from {', '.join(scopes.ACTIONS)})."]
        elif not actions:
            errors["actions"] = ["Choose at least one action, or none of them for every action."]
    if read_only:
        if actions is not None and set(actions) - {scopes.READ}:
            errors.setdefault("read_only", ["A read-only token takes no other action than read."])
        actions = [scopes.READ]
    if queues:
        usable = set(access.usable_queues(user).values_list("slug", flat=True))
        outside = sorted(set(queues) - usable)
        if outside:
            errors["queues"] = [f"Not a queue {user.get_username()} may use: {', '.join(outside)}."]
    if cap_gpu_hours is not None and not Decimal(0) < cap_gpu_hours <= MAX_CAP_GPU_HOURS:
        errors["cap_gpu_hours"] = [f"Give a cap above 0 and at most {MAX_CAP_GPU_HOURS:,} GPU-hours."]
    if cap_money is not None and not Decimal(0) < cap_money <= MAX_CAP_MONEY:
        errors["cap_money"] = [f"Give a cap above 0 and at most {MAX_CAP_MONEY:,}."]
    if errors:
        raise ScopeErrors(errors)
    return scopes.fields_for(actions, queues, cap_gpu_hours, cap_money)


def issue(
    user: Any, name: str, expires_at: datetime | None, by: Any, scope_fields: dict[str, Any] | None = None
) -> tuple[ApiToken, str]:
    """A new token for `user` (a person, or an agent's user row) and its plaintext, to be shown once;
    `scope_fields`: its scopes, as check_scopes gave them (None: a token with its user's full power)."""
    token, plaintext = ApiToken.issue(user, name, expires_at=expires_at, created_by=by, scopes=scope_fields)
    audit.record(
        "token.issued", label(token), actor=by, name=name, expires_at=expires_at, scopes=scopes.describe(token)
    )
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
