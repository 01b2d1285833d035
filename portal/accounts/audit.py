"""The audit log: who did what, and for policy objects what they were before and after.

Every change to a policy model (queues, targets, fabrics, quotas, temporary grants, priority tiers, profiles, teams,
memberships, claim mappings, service identities, POSIX policies and accounts, scheduler accounts, people's staff
flags) is recorded from model signals, whichever road it took: the admin, a page, the API or a command. The actor
is the signed-in user of the request being served (see AuditContextMiddleware), or whoever `acting_as` names;
a command line leaves it empty.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from django.apps import apps
from django.contrib.auth import user_logged_in, user_logged_out, user_login_failed
from django.core.serializers.json import DjangoJSONEncoder
from django.db import models
from django.db.models.signals import m2m_changed, post_delete, post_save, pre_save
from django.http import HttpRequest, HttpResponseBase

from portal.accounts.models import AuditEvent

# Policy models and the fields whose changes are recorded (None: every editable field).
AUDITED: dict[str, list[str] | None] = {
    "queues.Queue": None,
    "queues.QueueTarget": None,
    "queues.Fabric": None,
    "queues.Quota": None,
    "queues.PriorityTier": None,
    "queues.Profile": None,  # IT's ready-made sizes on the submit forms
    "queues.QuotaGrant": None,  # asked for and edited; its decisions are recorded by portal/queues/grants.py
    "accounts.ResourceGroup": None,
    "accounts.Membership": None,
    "accounts.ClaimMapping": None,
    "accounts.ServiceIdentity": None,
    "burst.BurstPool": None,
    "budgets.Budget": ["team", "user", "gpu_hours", "money", "window", "starts_on", "ends_on", "thresholds"],
    "burst.InstanceType": None,
    "accounts.PosixPolicy": None,
    "accounts.PosixAccount": None,
    "accounts.SchedulerAccount": None,
    "auth.User": ["username", "email", "is_active", "is_staff", "is_superuser"],
}
SECRET_KEY_RE = re.compile(r"pass|secret|token|private", re.IGNORECASE)


@dataclass(frozen=True)
class Acting:
    actor: Any
    via: str


_request: ContextVar[HttpRequest | None] = ContextVar("audit_request", default=None)
_acting: ContextVar[Acting | None] = ContextVar("audit_acting", default=None)
_FROM_CONTEXT: Any = object()


@contextmanager
def acting_as(actor: Any, via: str | None = None) -> Iterator[None]:
    """Record changes made inside the block as `actor`'s, done through `via` (e.g. "sign-in claims").

    Without `via`, the request being served (if any) says how.
    """
    request = _request.get()
    if via is None:
        via = f"{request.method} {request.path}" if request is not None else ""
    token = _acting.set(Acting(actor, via))
    try:
        yield
    finally:
        _acting.reset(token)


def client_ip(request: HttpRequest | None) -> str:
    return str(request.META.get("REMOTE_ADDR", "")) if request is not None else ""


def _context() -> tuple[Any, str]:
    acting = _acting.get()
    if acting is not None:
        return acting.actor, acting.via
    request = _request.get()
    if request is None:
        return None, ""
    user = getattr(request, "user", None)  # DRF sets it on the Django request once a token is checked
    actor = user if user is not None and user.is_authenticated else None
    return actor, f"{request.method} {request.path}"


def record(action: str, target: Any = "", *, actor: Any = _FROM_CONTEXT, **detail: Any) -> AuditEvent:
    """Write one audit event. The actor defaults to the one in context; `via` joins the detail."""
    event = build(action, target, actor=actor, **detail)
    event.save(force_insert=True)
    return event


def build(action: str, target: Any = "", *, actor: Any = _FROM_CONTEXT, **detail: Any) -> AuditEvent:
    """The event record() would write, unsaved (for a caller that writes it inside a statement of its own)."""
    context_actor, via = _context()
    if actor is _FROM_CONTEXT:
        actor = context_actor
    if via and "via" not in detail:
        detail["via"] = via
    return AuditEvent(
        actor=actor if actor is not None and actor.pk is not None else None,
        actor_name=actor.get_username() if actor is not None else "",
        action=action,
        target=str(target)[:200],
        detail=_plain(detail),
    )


class _Encoder(DjangoJSONEncoder):
    def default(self, o: Any) -> Any:
        try:
            return super().default(o)
        except TypeError:
            return str(o)


def _plain(value: Any) -> Any:
    """JSON-safe copy (dates in ISO 8601, decimals and UUIDs as text) with secret-looking keys masked."""
    data = json.loads(json.dumps(value, cls=_Encoder))
    return _mask(data)


def _mask(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: "***" if SECRET_KEY_RE.search(str(k)) else _mask(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_mask(v) for v in value]
    return value


class AuditContextMiddleware:
    """Lets audit records made while serving a request name its user and path."""

    def __init__(self, get_response: Any) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponseBase:
        token = _request.set(request)
        try:
            response: HttpResponseBase = self.get_response(request)
            return response
        finally:
            _request.reset(token)


# --- Policy changes, from model signals -------------------------------------------------------------


def _fields(model: type[models.Model]) -> list[models.Field[Any, Any]]:
    wanted = AUDITED[model._meta.label]
    fields = [f for f in model._meta.concrete_fields if not f.primary_key and f.editable]
    if wanted is not None:
        fields = [f for f in fields if f.name in wanted]
    return fields


def _values(instance: models.Model) -> dict[str, Any]:
    return {f.attname: getattr(instance, f.attname) for f in _fields(type(instance))}


def _readable(
    model: type[models.Model], values: dict[str, Any], names: set[str], instance: models.Model | None = None
) -> dict[str, Any]:
    """Field name -> value for the given attnames, with foreign keys shown as the related object's name."""
    out: dict[str, Any] = {}
    for field in _fields(model):
        if field.attname not in names:
            continue
        value = values.get(field.attname)
        if isinstance(field, models.ForeignKey) and value is not None:
            cached = field.get_cached_value(instance, None) if instance is not None else None
            if cached is None or cached.pk != value:
                cached = field.related_model._base_manager.filter(pk=value).first()  # type: ignore[union-attr]
            value = str(cached) if cached is not None else value
        out[field.name] = value
    return out


def _label(instance: models.Model) -> str:
    return instance._meta.model_name or type(instance).__name__.lower()


def _before_save(sender: type[models.Model], instance: models.Model, raw: bool = False, **kwargs: Any) -> None:
    if raw or instance.pk is None or instance._state.adding:
        return
    update_fields = kwargs.get("update_fields")
    audited = {f.name for f in _fields(sender)} | {f.attname for f in _fields(sender)}
    if update_fields is not None and not audited & set(update_fields):
        return  # e.g. the worker writing a fabric's health, or a sign-in writing last_login
    before = sender._base_manager.filter(pk=instance.pk).values(*[f.attname for f in _fields(sender)]).first()
    instance._audit_before = before  # type: ignore[attr-defined]


def _after_save(
    sender: type[models.Model], instance: models.Model, created: bool, raw: bool = False, **kwargs: Any
) -> None:
    if raw:
        return
    after = _values(instance)
    if created:
        record(f"{_label(instance)}.created", instance, after=_readable(sender, after, set(after), instance))
        return
    before = getattr(instance, "_audit_before", None)
    instance._audit_before = None  # type: ignore[attr-defined]
    if before is None:
        return
    changed = {name for name, value in after.items() if before.get(name) != value}
    if changed:
        record(
            f"{_label(instance)}.changed",
            instance,
            before=_readable(sender, before, changed),
            after=_readable(sender, after, changed, instance),
        )


def _after_delete(sender: type[models.Model], instance: models.Model, **kwargs: Any) -> None:
    before = _values(instance)
    record(f"{_label(instance)}.deleted", instance, before=_readable(sender, before, set(before), instance))


def _m2m(
    sender: Any,
    instance: models.Model,
    action: str,
    reverse: bool,
    model: type[models.Model],
    pk_set: set[Any] | None,
    **kwargs: Any,
) -> None:
    if reverse:
        return  # changed from the other side (e.g. deleting a team): its own record says so
    field = next(f for f in instance._meta.many_to_many if f.remote_field.through is sender)
    if action == "pre_clear":
        instance._audit_cleared = [str(o) for o in getattr(instance, field.name).all()]  # type: ignore[attr-defined]
        return
    if action == "post_clear":
        removed = getattr(instance, "_audit_cleared", [])
        if removed:
            record(f"{_label(instance)}.changed", instance, field=field.name, added=[], removed=removed)
        return
    if action not in ("post_add", "post_remove") or not pk_set:
        return
    names = sorted(str(o) for o in model._base_manager.filter(pk__in=pk_set))
    added, removed = (names, []) if action == "post_add" else ([], names)
    record(f"{_label(instance)}.changed", instance, field=field.name, added=added, removed=removed)


# --- Sign-ins ----------------------------------------------------------------------------------------


def _signed_in(sender: Any, request: HttpRequest | None, user: Any, **kwargs: Any) -> None:
    backend = getattr(user, "backend", "") or ""
    method = "oidc" if backend.endswith("oidc.Backend") else "password"
    record("signin", user, actor=user, method=method, ip=client_ip(request))


def _signed_out(sender: Any, request: HttpRequest | None, user: Any, **kwargs: Any) -> None:
    if user is not None:
        record("signout", user, actor=user, ip=client_ip(request))


def _sign_in_failed(
    sender: Any, credentials: dict[str, Any], request: HttpRequest | None = None, **kwargs: Any
) -> None:
    reason = getattr(request, "gridlane_signin_failure", None)
    method = "oidc" if reason is not None or "nonce" in credentials else "password"
    username = str(credentials.get("username", "") or getattr(request, "gridlane_signin_username", ""))
    record(
        "signin.failed",
        username,
        actor=None,
        method=method,
        reason=reason or ("wrong username or password" if method == "password" else "refused"),
        ip=client_ip(request),
    )


def connect() -> None:
    """Called once from the app's ready()."""
    for label in AUDITED:
        model = apps.get_model(label)
        uid = f"audit:{label}"
        pre_save.connect(_before_save, sender=model, dispatch_uid=uid)
        post_save.connect(_after_save, sender=model, dispatch_uid=uid)
        post_delete.connect(_after_delete, sender=model, dispatch_uid=uid)
        for field in model._meta.many_to_many:
            m2m_changed.connect(_m2m, sender=field.remote_field.through, dispatch_uid=f"{uid}:{field.name}")
    user_logged_in.connect(_signed_in, dispatch_uid="audit:signin")
    user_logged_out.connect(_signed_out, dispatch_uid="audit:signout")
    user_login_failed.connect(_sign_in_failed, dispatch_uid="audit:signin.failed")
