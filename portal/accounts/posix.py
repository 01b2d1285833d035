"""Who a job runs as on a fabric: the owner's POSIX user and the team's scheduler account, from IT's mapping.

On a fabric with a PosixPolicy, a person's POSIX user is, in order: their PosixAccount for that fabric,
their PosixAccount for every fabric, or the policy's claim (stored at sign-in, see oidc.sign_in)
rewritten by the policy's pattern. Agents have no claims: only a PosixAccount maps them. Whatever the
source, the result must be a POSIX user name and never root, or the person is refused with the reason.
On a fabric without a policy, jobs run as the fabric's own account (RunAs("", "")).

The team's account is its SchedulerAccount on the fabric, else the policy's default account, else none.

Lookups are cached for a short while (a submit checks them without a database statement when warm, the
policies coming with the queue's fabrics);
any change to policies, accounts or identities starts a new generation of the cache in this process,
and other processes see it within CACHE_SECONDS. The fabric checks the uid floor itself when it runs
the job (fabrics.ssh.runas).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from django.core.cache import cache
from django.core.exceptions import ValidationError
from django.db.models.signals import post_delete, post_save

from portal.accounts.models import (
    ExternalIdentity,
    PosixAccount,
    PosixPolicy,
    SchedulerAccount,
    validate_posix_name,
)

CACHE_SECONDS = 60
_GENERATION = "gridlane:posix:generation"
STORED_CLAIMS = ("preferred_username", "uid")  # kept at every sign-in, beside those a policy names


@dataclass(frozen=True)
class RunAs:
    """Who runs a job on one fabric. user "" with no refusal: the fabric's own account (no policy there)."""

    user: str = ""
    account: str = ""
    refusal: str = ""  # why this person cannot run here; user is then ""


@dataclass(frozen=True)
class _Policy:
    fabric_id: int
    fabric_name: str
    claim: str
    pattern: str
    replacement: str
    default_account: str


def _generation() -> int:
    value = cache.get(_GENERATION)
    if value is None:
        value = 1
        cache.add(_GENERATION, value, None)
    return int(value)


def forget(*args: Any, **kwargs: Any) -> None:
    """Start a new generation: every cached lookup is read again (a signal handler)."""
    try:
        cache.incr(_GENERATION)
    except ValueError:
        cache.set(_GENERATION, 2, None)


def _policies() -> dict[int, _Policy]:
    key = f"gridlane:posix:{_generation()}:policies"
    cached = cache.get(key)
    if cached is None:
        cached = {
            p.fabric_id: _Policy(p.fabric_id, p.fabric.name, p.claim, p.pattern, p.replacement, p.default_account)
            for p in PosixPolicy.objects.select_related("fabric")
        }
        cache.set(key, cached, CACHE_SECONDS)
    return dict(cached)


def _accounts() -> dict[tuple[int, int], str]:
    """(team id, fabric id) -> scheduler account."""
    key = f"gridlane:posix:{_generation()}:accounts"
    cached = cache.get(key)
    if cached is None:
        cached = {(a.group_id, a.fabric_id): a.account for a in SchedulerAccount.objects.all()}
        cache.set(key, cached, CACHE_SECONDS)
    return dict(cached)


def _person(user_id: int) -> dict[str, Any]:
    """What names a user: their username, claims, whether they are an agent, and their explicit accounts."""
    key = f"gridlane:posix:{_generation()}:user:{user_id}"
    cached = cache.get(key)
    if cached is None:
        from django.contrib.auth import get_user_model

        found = (
            get_user_model()
            .objects.filter(pk=user_id)
            .values("username", "external_identity__claims", "service_identity__id")
            .first()
        )
        row: dict[str, Any] = dict(found) if found else {}
        explicit = {
            fabric_id or 0: name
            for fabric_id, name in PosixAccount.objects.filter(user_id=user_id).values_list("fabric_id", "posix_user")
        }
        cached = {
            "username": row.get("username", ""),
            "claims": row.get("external_identity__claims") or {},
            "agent": row.get("service_identity__id") is not None,
            "explicit": explicit,
        }
        cache.set(key, cached, CACHE_SECONDS)
    return dict(cached)


def map_name(policy: _Policy | PosixPolicy, value: str) -> str:
    """The POSIX user a claim value becomes under a policy; ValidationError saying why when it becomes none."""
    match = re.fullmatch(policy.pattern, value)
    if match is None:
        raise ValidationError(f"{value!r} does not match the pattern {policy.pattern!r}")
    try:
        name = match.expand(policy.replacement)
    except (re.error, IndexError) as error:
        raise ValidationError(f"the replacement {policy.replacement!r} does not apply: {error}") from error
    validate_posix_name(name)
    return name


def _resolve(person: dict[str, Any], policy: _Policy) -> RunAs:
    who = person["username"]
    explicit = person["explicit"].get(policy.fabric_id) or person["explicit"].get(0)
    if explicit:
        try:
            validate_posix_name(explicit)
        except ValidationError as error:
            return RunAs(refusal=f"{who}'s account on {policy.fabric_name} is refused: {' '.join(error.messages)}")
        return RunAs(user=explicit)
    if person["agent"]:
        return RunAs(refusal=f"the agent {who} has no POSIX account on {policy.fabric_name}; IT gives it one")
    if policy.claim:
        value = person["claims"].get(policy.claim)
        if value is None or value == "":
            return RunAs(
                refusal=f"{who} has no {policy.claim!r} claim for {policy.fabric_name} (sign in again, or ask IT)"
            )
        value = str(value)
    else:
        value = who
    try:
        return RunAs(user=map_name(policy, value))
    except ValidationError as error:
        return RunAs(refusal=f"{who} maps to no POSIX user on {policy.fabric_name}: {' '.join(error.messages)}")


def run_as(user_id: int, group_id: int, fabric_id: int) -> RunAs:
    """Who a job of this user and team runs as on this fabric (cached; no statement when warm)."""
    policy = _policies().get(fabric_id)
    if policy is None:
        return RunAs()
    found = _resolve(_person(user_id), policy)
    if found.refusal:
        return found
    account = _accounts().get((group_id, fabric_id), policy.default_account)
    return RunAs(user=found.user, account=account)


def refusals(user_id: int, fabrics: Iterable[Any]) -> list[str]:
    """Why this user cannot run on some of these fabrics (Fabric rows); [] when they can on all.

    Rows loaded with their policy (select_related("posix_policy")) cost no statement for it; with none of
    them under a policy, nothing more is read.
    """
    wanted = []
    for fabric in fabrics:
        try:
            policy = fabric.posix_policy
        except PosixPolicy.DoesNotExist:
            continue
        wanted.append(_Policy(fabric.pk, fabric.name, policy.claim, policy.pattern, policy.replacement, ""))
    if not wanted:
        return []
    person = _person(user_id)
    return [found.refusal for policy in wanted if (found := _resolve(person, policy)).refusal]


def claims_to_store(all_claims: dict[str, Any]) -> dict[str, Any]:
    """The claims kept at sign-in: those any policy names and the usual ones, when they are short scalars."""
    names = set(STORED_CLAIMS) | {p.claim for p in _policies().values() if p.claim}
    return {
        name: value
        for name in sorted(names)
        if isinstance(value := all_claims.get(name), (str, int))
        and not isinstance(value, bool)
        and len(str(value)) <= 200
    }


def connect() -> None:
    """Called once from the app's ready(): a change to what maps people starts a new cache generation."""
    for model in (PosixPolicy, PosixAccount, SchedulerAccount, ExternalIdentity):
        post_save.connect(forget, sender=model, dispatch_uid=f"posix:{model.__name__}")
        post_delete.connect(forget, sender=model, dispatch_uid=f"posix:{model.__name__}")
