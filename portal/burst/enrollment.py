"""One-time enrollment tokens: minted per instance into its boot script, stored hashed, expiring, spent once
to give the instance's agent an identity of its own for the pool's fabric (and no other)."""

from __future__ import annotations

import hashlib
import secrets
from datetime import datetime, timedelta

from django.db import transaction
from django.utils import timezone

from portal.accounts import agents as service_identities
from portal.accounts.models import ServiceIdentity
from portal.agents import services as agents
from portal.burst.models import EnrollmentToken, Instance

ENROLLING = (Instance.State.PENDING, Instance.State.BOOTING)


class Refused(Exception):
    """The token is unknown, spent, expired, or names another host; the message says which."""


def _hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def mint(instance: Instance, now: datetime, valid_for: timedelta) -> str:
    """A fresh token for the instance (a new launch attempt replaces the last); returns the plaintext."""
    token = "glenroll_" + secrets.token_urlsafe(32)
    EnrollmentToken.objects.update_or_create(
        instance=instance, defaults={"token_hash": _hash(token), "expires_at": now + valid_for, "used_at": None}
    )
    return token


@transaction.atomic
def redeem(token: str, host: str) -> tuple[Instance, str]:
    """Spend the token: returns the instance and its agent's own API token. Raises Refused."""
    now = timezone.now()
    row = EnrollmentToken.objects.select_related("instance__pool__fabric").filter(token_hash=_hash(token)).first()
    if row is None:
        raise Refused("This enrollment token is not known.")
    instance = row.instance
    if row.used_at is not None:
        raise Refused("This enrollment token was used already.")
    if row.expires_at <= now:
        raise Refused("This enrollment token has expired.")
    if host != instance.host_name:
        raise Refused("This enrollment token belongs to another host.")
    if instance.state not in ENROLLING:
        raise Refused("This instance is no longer expected to enroll.")
    if not EnrollmentToken.objects.filter(pk=row.pk, used_at__isnull=True).update(used_at=now):
        raise Refused("This enrollment token was used already.")  # another request spent it just now
    pool = instance.pool
    # The identity is disabled when the instance ends (retire); the expiry only bounds one that was missed.
    _, api_token = agents.enroll(pool.fabric, identity_name(instance), pool.agent_group, by=None, days=30)
    return instance, api_token


def identity_name(instance: Instance) -> str:
    return f"burst-{instance.launch_id}"


def retire(instance: Instance) -> None:
    """The instance ended: its agent's identity can do nothing more."""
    username = service_identities.username_for(identity_name(instance))
    service = ServiceIdentity.objects.filter(user__username=username, disabled_at__isnull=True).first()
    if service is not None:
        service_identities.disable(service, by=None)
