"""Who people and agents are: teams and roles, the claims that grant them, tokens, service identities, the audit log."""

from __future__ import annotations

import hashlib
import re
import secrets
from datetime import datetime
from typing import Any, ClassVar

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.serializers.json import DjangoJSONEncoder
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.db.models import Q, Sum
from django.db.models.expressions import RawSQL
from django.utils import timezone
from django.utils.crypto import salted_hmac

from portal import sql
from portal.accounts import scopes


class ResourceGroup(models.Model):
    """A team or department: the unit that owns quotas and sees its own work."""

    slug = models.SlugField(unique=True)
    name = models.CharField(max_length=100)
    parent = models.ForeignKey("self", null=True, blank=True, on_delete=models.PROTECT, related_name="children")
    fair_share_weight = models.PositiveIntegerField(default=1, validators=[MinValueValidator(1)])
    wait_slo_seconds = models.PositiveIntegerField(
        default=3600, help_text="The team's p95 queue-wait objective, in seconds."
    )
    member_gpu_limit_milli = models.PositiveIntegerField(
        "GPU limit per member (milli)",
        null=True,
        blank=True,
        help_text="GPUs any one person may hold in this team at once, over all fabrics (so that one person cannot "
        "take the team's whole share). 1000 = one GPU. Agents keep their own limits. Empty: no cap.",
    )

    class Meta:
        ordering = ["slug"]
        verbose_name = "team"  # what people call it everywhere in Gridlane

    def __str__(self) -> str:
        return self.name

    def clean(self) -> None:
        seen, above = {self.pk}, self.parent
        while above is not None:  # a department above itself would never be below a limit
            if above.pk in seen:
                raise ValidationError({"parent": f"{above.name} is already below {self.name}: a department cycle."})
            seen.add(above.pk)
            above = above.parent
        if self.member_gpu_limit_milli is None or self.pk is None:
            return
        _, limit = self.gpu_quota_milli()
        if limit is not None and self.member_gpu_limit_milli > limit:
            message = f"Above the team's own limit ({limit} milli-GPUs): a member's cap fits in it."
            raise ValidationError({"member_gpu_limit_milli": message})

    def gpu_quota_milli(self) -> tuple[int, int | None]:
        """The team's GPU reservation and limit over all fabrics, in milli-GPUs.

        Per-fabric quotas add up (no limit counts as the fabric's size); a team-wide quota (no fabric)
        is a cap across all fabrics, not a fabric's share: it only lowers that sum.
        """
        return combined_gpu_quota(list(self.quotas.select_related("fabric")))


def combined_gpu_quota(quotas: list[Any]) -> tuple[int, int | None]:
    """A team's GPU reservation and limit over all fabrics, in milli-GPUs, from its quotas (anything with
    `fabric` (None: team-wide, else with `gpus_milli`), `gpu_reservation_milli` and `gpu_limit_milli`);
    the limit is None when there is no quota at all."""
    if not quotas:
        return 0, None
    reservation = per_fabric = 0
    overall: int | None = None
    any_fabric = False
    for quota in quotas:
        if quota.fabric is None:
            overall = quota.gpu_limit_milli
            continue
        any_fabric = True
        reservation += quota.gpu_reservation_milli
        per_fabric += quota.fabric.gpus_milli if quota.gpu_limit_milli is None else quota.gpu_limit_milli
    if not any_fabric:
        return reservation, overall
    return reservation, per_fabric if overall is None else min(per_fabric, overall)


class Membership(models.Model):
    class Role(models.TextChoices):
        MEMBER = "member"
        LEAD = "lead"

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships")
    group = models.ForeignKey(ResourceGroup, on_delete=models.CASCADE, related_name="memberships", verbose_name="team")
    role = models.CharField(max_length=10, choices=Role.choices, default=Role.MEMBER)

    class Meta:
        constraints: ClassVar[list[Any]] = [
            models.UniqueConstraint(fields=["user", "group"], name="one_membership_per_group")
        ]

    def __str__(self) -> str:
        return f"{self.user} in {self.group} ({self.role})"


class ClaimMapping(models.Model):
    """What one value of the identity provider's groups claim grants: a role in a team, IT staff, or both.

    Applied at every sign-in. A team with at least one mapping is managed by claims: memberships
    that the claims no longer give are removed. A team without mappings is managed by hand.
    """

    claim_value = models.CharField(max_length=200, db_index=True, help_text='e.g. "vision" or "cn=ml-leads,ou=groups"')
    group = models.ForeignKey(
        ResourceGroup,
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="claim_mappings",
        verbose_name="team",
    )
    role = models.CharField(max_length=10, choices=Membership.Role.choices, default=Membership.Role.MEMBER)
    makes_it_staff = models.BooleanField(
        "makes IT staff", default=False, help_text="People with this claim value administer Gridlane."
    )

    class Meta:
        ordering = ["claim_value", "group__slug"]
        constraints: ClassVar[list[Any]] = [
            models.UniqueConstraint(fields=["claim_value", "group"], name="one_mapping_per_claim_and_group"),
            models.CheckConstraint(
                condition=Q(group__isnull=False) | Q(makes_it_staff=True), name="mapping_grants_something"
            ),
        ]

    def __str__(self) -> str:
        grants = [f"{self.role} of {self.group}"] if self.group_id else []
        grants += ["IT staff"] if self.makes_it_staff else []
        return f"{self.claim_value} -> {', '.join(grants)}"

    def clean(self) -> None:
        if self.group_id is None and not self.makes_it_staff:
            raise ValidationError("Map the claim value to a team, to IT staff, or both.")


class ExternalIdentity(models.Model):
    """The person at the identity provider (issuer and subject) that a Gridlane user is."""

    user = models.OneToOneField(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="external_identity")
    issuer = models.CharField(max_length=300)
    subject = models.CharField(max_length=255)
    groups = models.JSONField(default=list, blank=True, help_text="The groups claim at the last sign-in.")
    claims = models.JSONField(
        default=dict,
        blank=True,
        help_text="At the last sign-in, the claims a POSIX mapping may name (preferred_username, uid, ...).",
    )
    synced_at = models.DateTimeField(default=timezone.now)

    class Meta:
        verbose_name_plural = "external identities"
        constraints: ClassVar[list[Any]] = [
            models.UniqueConstraint(fields=["issuer", "subject"], name="one_user_per_external_subject")
        ]

    def __str__(self) -> str:
        return f"{self.subject} at {self.issuer}"


SERVICE_USERNAME_PREFIX = "svc."


class ServiceIdentity(models.Model):
    """An AI agent or pipeline with its own user row, team, queues, expiry, rate limit and GPU sub-quota.

    The sub-quota sits inside the team's: the scheduler admits the agent's work only within it.
    """

    user = models.OneToOneField(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="service_identity")
    group = models.ForeignKey(
        ResourceGroup, on_delete=models.PROTECT, related_name="service_identities", verbose_name="team"
    )
    description = models.CharField(max_length=200, blank=True)
    allowed_queues = models.ManyToManyField(
        "queues.Queue",
        blank=True,
        related_name="service_identities",
        help_text="Queues the agent may use, among its team's. None chosen means all of the team's queues.",
    )
    expires_at = models.DateTimeField(help_text="After this the agent's tokens stop working.")
    rate_limit_per_minute = models.PositiveIntegerField(
        default=30, validators=[MinValueValidator(1), MaxValueValidator(10_000)], help_text="Submissions per minute."
    )
    gpu_reservation_milli = models.PositiveIntegerField(
        "GPU reservation (milli)", default=0, help_text="Guaranteed to the agent out of its team's. 1000 = one GPU."
    )
    gpu_limit_milli = models.PositiveIntegerField(
        "GPU limit (milli)", null=True, blank=True, help_text="The agent's cap. Empty means the team's limit."
    )
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(default=timezone.now, editable=False)
    disabled_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["user__username"]
        verbose_name_plural = "service identities"

    def __str__(self) -> str:
        return self.name

    @property
    def name(self) -> str:
        return self.user.username

    def is_active(self, now: datetime | None = None) -> bool:
        return self.disabled_at is None and self.expires_at > (now or timezone.now())

    def clean(self) -> None:
        errors: dict[str, str] = {}
        if self.gpu_limit_milli is not None and self.gpu_limit_milli < self.gpu_reservation_milli:
            errors["gpu_limit_milli"] = (
                f"The limit ({self.gpu_limit_milli}) is below the reservation ({self.gpu_reservation_milli})."
            )
        if self.group_id is not None:
            group_reservation, group_limit = self.group.gpu_quota_milli()
            others = (
                ServiceIdentity.objects.filter(group_id=self.group_id, disabled_at__isnull=True)
                .exclude(pk=self.pk)
                .aggregate(total=Sum("gpu_reservation_milli"))["total"]
                or 0
            )
            if others + self.gpu_reservation_milli > group_reservation:
                errors["gpu_reservation_milli"] = (
                    f"The team {self.group.slug!r} reserves {group_reservation} milli-GPUs, "
                    f"{others} of them already for its other agents."
                )
            if group_limit is not None and (self.gpu_limit_milli or 0) > group_limit:
                errors.setdefault(
                    "gpu_limit_milli", f"The team {self.group.slug!r} may use at most {group_limit} milli-GPUs."
                )
        if errors:
            raise ValidationError(errors)


TOKEN_PREFIX = "glt_"  # noqa: S105 (a public prefix that lets scanners spot leaked tokens)
TOKEN_DIGEST_SALT = "gridlane.accounts.ApiToken"  # noqa: S105 (the HMAC's salt, not a secret)


def _digest(plaintext: str, key: str | None = None) -> str:
    """HMAC-SHA256 of the token under a key derived from the secret key (or one of its fallbacks).

    Tokens carry 256 random bits, so one keyed fast hash is enough; a slow KDF would only slow every
    request. The key means a stolen copy of the table cannot be checked against guesses offline.
    """
    return salted_hmac(TOKEN_DIGEST_SALT, plaintext, secret=key, algorithm="sha256").hexdigest()


def _legacy_digest(plaintext: str) -> str:
    """How tokens issued before keyed digests are stored: a bare SHA-256 (rewritten at their next use)."""
    return hashlib.sha256(plaintext.encode()).hexdigest()


def current_digest(plaintext: str) -> str:
    """The digest a token with this plaintext is stored under now (under the current secret key)."""
    return _digest(plaintext, settings.SECRET_KEY)


def _candidate_digests(plaintext: str) -> list[str]:
    """Every digest this token may be stored under: the current key's first, then the fallback keys'
    (a rotated secret key), then the legacy bare SHA-256."""
    keys = [settings.SECRET_KEY, *getattr(settings, "SECRET_KEY_FALLBACKS", [])]
    return [_digest(plaintext, key) for key in keys] + [_legacy_digest(plaintext)]


class ApiToken(models.Model):
    """A bearer token, stored as its HMAC-SHA256 digest: the plaintext is shown once and never kept.

    It acts as its user: a person (a personal token) or a service identity's user row (an agent's token).
    """

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens")
    name = models.CharField(max_length=100)
    digest = models.CharField(max_length=64, unique=True, editable=False)
    hint = models.CharField(max_length=12, editable=False, help_text="The first characters, to tell tokens apart.")
    created_at = models.DateTimeField(default=timezone.now, editable=False)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+", editable=False
    )
    last_used_at = models.DateTimeField(null=True, blank=True, editable=False)
    expires_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    # Scopes (portal.accounts.scopes), fixed when the token is issued and read with it in its one look-up.
    # None everywhere: a token as powerful as its user.
    scope_actions = models.PositiveSmallIntegerField(
        null=True, blank=True, editable=False, help_text="The actions it may take, as bits; empty: every action."
    )
    scope_queues = models.JSONField(
        null=True, blank=True, editable=False, help_text="Slugs of the only queues it may use; empty: its user's."
    )
    cap_gpu_hours = models.DecimalField(
        "cap (GPU-hours)",
        max_digits=12,
        decimal_places=3,
        null=True,
        blank=True,
        editable=False,
        help_text="GPU-hours the work it submits may spend in all; empty: no cap of its own.",
    )
    cap_money = models.DecimalField(
        "cap (money)",
        max_digits=14,
        decimal_places=2,
        null=True,
        blank=True,
        editable=False,
        help_text="What the work it submits may cost in all, in the site's currency; empty: no cap of its own.",
    )

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"{self.name} ({self.hint}…)"

    @property
    def live(self) -> bool:
        return self.revoked_at is None and (self.expires_at is None or self.expires_at > timezone.now())

    @property
    def scoped(self) -> bool:
        """Whether any scope limits it (else it has its user's full power)."""
        return (
            self.scope_actions is not None
            or bool(self.scope_queues)
            or self.cap_gpu_hours is not None
            or self.cap_money is not None
        )

    @property
    def scope_summary(self) -> str:
        """Its scopes in words ("full access" without any), as token lists show them."""
        return scopes.describe(self)

    @classmethod
    def issue(
        cls,
        user: Any,
        name: str,
        expires_at: datetime | None = None,
        created_by: Any = None,
        scopes: dict[str, Any] | None = None,
    ) -> tuple[ApiToken, str]:
        """`scopes`: the scope fields (scope_actions, scope_queues, cap_gpu_hours, cap_money), already checked."""
        plaintext = TOKEN_PREFIX + secrets.token_urlsafe(32)
        token = cls.objects.create(
            user=user,
            name=name,
            digest=_digest(plaintext),
            hint=plaintext[:12],
            expires_at=expires_at,
            created_by=created_by,
            **(scopes or {}),
        )
        return token, plaintext

    @classmethod
    def lookup(cls, plaintext: str, read_with: tuple[str, str] | None = None) -> ApiToken | None:
        """The live token for this plaintext, or None when it is unknown, revoked or expired.

        One indexed query finds it under any digest it may be stored under, with its user and the user's
        service identity (or its absence). A token found under an older digest (a fallback secret key, or
        the bare SHA-256 of tokens issued before keyed digests) is rewritten under the current one, once.

        `read_with`, (name, an SQL expression of no parameters): a value read in the same statement, so that
        it and the token are seen as of one moment, set on the token under that name.
        """
        if not plaintext.startswith(TOKEN_PREFIX):
            return None
        digests = _candidate_digests(plaintext)
        extra = {} if read_with is None else {read_with[0]: RawSQL(read_with[1], [])}  # noqa: S611 (the caller's constant)
        found = _TOKEN.run(
            ("token", len(digests), read_with),
            lambda *d: (
                cls.objects.select_related("user", "user__service_identity").annotate(**extra).filter(digest__in=d)[:1]
            ),
            *digests,
        )
        token: ApiToken | None = found[0] if found else None
        if token is None or token.revoked_at is not None:
            return None
        if token.expires_at is not None and token.expires_at <= timezone.now():
            return None
        if token.digest != digests[0]:
            cls.objects.filter(pk=token.pk, digest=token.digest).update(digest=digests[0])
            token.digest = digests[0]
        return token


# A token's look-up runs on every API request: built and compiled once (sql.Compiled), then only sent.
_TOKEN = sql.Compiled(ApiToken)


class AuditEvent(models.Model):
    """Something worth knowing later: a sign-in, a token issued or used, a policy changed (before and after)."""

    at = models.DateTimeField(default=timezone.now, db_index=True)
    actor = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)
    actor_name = models.CharField(max_length=150, blank=True, help_text="Kept when the actor's account is deleted.")
    action = models.CharField(max_length=60, db_index=True)
    target = models.CharField(max_length=200, blank=True)
    detail = models.JSONField(default=dict, blank=True, encoder=DjangoJSONEncoder)

    class Meta:
        ordering = ["-at", "-pk"]

    def __str__(self) -> str:
        return f"{self.at:%Y-%m-%d %H:%M} {self.action} {self.target}"


class RateLimitWindow(models.Model):
    """A fixed-window counter (e.g. submissions by one identity in one minute), shared by every web process."""

    key = models.CharField(max_length=100)
    window_start = models.DateTimeField()
    count = models.PositiveIntegerField(default=0)

    class Meta:
        constraints: ClassVar[list[Any]] = [
            models.UniqueConstraint(fields=["key", "window_start"], name="one_counter_per_key_and_window")
        ]

    def __str__(self) -> str:
        return f"{self.key} @ {self.window_start:%H:%M:%S}: {self.count}"


# --- Who a job runs as: POSIX users and scheduler accounts, per fabric -------------------------------

POSIX_NAME = r"[a-z_][a-z0-9_-]{0,31}"  # a portable user name, as useradd's default NAME_REGEX, without `$`
SCHEDULER_ACCOUNT = r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}"  # a Slurm account / PBS project


def validate_posix_name(value: str) -> None:
    """Refuse what is not a POSIX user name Gridlane would run as (root never is)."""
    if not re.fullmatch(POSIX_NAME, value):
        raise ValidationError(
            f"{value!r} is not a POSIX user name (a lower-case letter or _, then letters, digits, _ or -, 32 at most)."
        )
    if value == "root":
        raise ValidationError("Nothing runs as root.")


def validate_scheduler_account(value: str) -> None:
    if not re.fullmatch(SCHEDULER_ACCOUNT, value):
        raise ValidationError(f"{value!r} is not a scheduler account (letters, digits, _ . -, 64 at most).")


def validate_pattern(value: str) -> None:
    try:
        re.compile(value)
    except re.error as error:
        raise ValidationError(f"Not a regular expression: {error}.") from error


class PosixPolicy(models.Model):
    """How people become POSIX users on one fabric, and the scheduler account a team's jobs carry by default.

    A fabric with a policy runs every job as its owner's own account (and refuses people it cannot map);
    a fabric without one runs jobs as its own account, as it always has. The person's name comes from an
    explicit PosixAccount if there is one, else from the claim, rewritten by `pattern` -> `replacement`.
    """

    fabric = models.OneToOneField("queues.Fabric", on_delete=models.CASCADE, related_name="posix_policy")
    claim = models.CharField(
        max_length=100,
        blank=True,
        default="preferred_username",
        help_text='The sign-in claim that names the person, e.g. "preferred_username" or "uid". '
        "Empty: the Gridlane username.",
    )
    pattern = models.CharField(
        max_length=200,
        default="^(.*)$",
        validators=[validate_pattern],
        help_text=r"Must match the whole claim value, e.g. ^(.*)@corp\.example$. No match: no mapping.",
    )
    replacement = models.CharField(
        max_length=200, default=r"\1", help_text=r"The POSIX user name, from the pattern's groups, e.g. \1."
    )
    default_account = models.CharField(
        max_length=64,
        blank=True,
        validators=[validate_scheduler_account],
        help_text="The Slurm --account / PBS -A for teams without one of their own here. Empty: the user's default.",
    )

    class Meta:
        verbose_name = "POSIX policy"
        verbose_name_plural = "POSIX policies"

    def __str__(self) -> str:
        return f"run as the person on {self.fabric}"


class PosixAccount(models.Model):
    """An explicit POSIX user for one person or agent: an exception to the claim, or an agent's account."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="posix_accounts")
    fabric = models.ForeignKey(
        "queues.Fabric",
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="posix_accounts",
        help_text="Empty: on every fabric with a POSIX policy (a fabric's own row wins).",
    )
    posix_user = models.CharField("POSIX user", max_length=32, validators=[validate_posix_name])

    class Meta:
        ordering = ["user__username"]
        verbose_name = "POSIX account"
        constraints: ClassVar[list[Any]] = [
            models.UniqueConstraint(fields=["user", "fabric"], name="one_posix_account_per_user_and_fabric"),
            models.UniqueConstraint(
                fields=["user"], condition=Q(fabric__isnull=True), name="one_posix_account_per_user_everywhere"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.user} -> {self.posix_user} on {self.fabric or 'every fabric'}"


class SchedulerAccount(models.Model):
    """The Slurm account (PBS project) a team's jobs carry on one fabric: the team in the scheduler's accounting."""

    group = models.ForeignKey(ResourceGroup, on_delete=models.CASCADE, related_name="scheduler_accounts")
    fabric = models.ForeignKey("queues.Fabric", on_delete=models.CASCADE, related_name="scheduler_accounts")
    account = models.CharField(max_length=64, validators=[validate_scheduler_account])

    class Meta:
        ordering = ["group__slug"]
        constraints: ClassVar[list[Any]] = [
            models.UniqueConstraint(fields=["group", "fabric"], name="one_scheduler_account_per_group_and_fabric"),
        ]

    def __str__(self) -> str:
        return f"{self.group} -> {self.account} on {self.fabric}"


class SchedulerUsage(models.Model):
    """A team's GPU-hours on one fabric over one window, as Gridlane counts them and as the scheduler's own
    accounting does (sacct for the team's account), side by side. The worker writes it; pages only read it."""

    group = models.ForeignKey(ResourceGroup, on_delete=models.CASCADE, related_name="scheduler_usage")
    fabric = models.ForeignKey("queues.Fabric", on_delete=models.CASCADE, related_name="scheduler_usage")
    account = models.CharField(max_length=64)
    window_start = models.DateTimeField()
    window_end = models.DateTimeField()
    gridlane_gpu_hours = models.FloatField(help_text="Gridlane's own records of its jobs in the window.")
    scheduler_gpu_hours = models.FloatField(help_text="What sacct reports for the same jobs (Gridlane's, by tag).")
    account_gpu_hours = models.FloatField(help_text="What sacct reports for every job on the account.")
    members = models.JSONField(
        default=list,
        blank=True,
        help_text='Per member: [{"member", "posix" (the users sacct names), "gridlane", "scheduler"}] GPU-hours.',
    )
    fetched_at = models.DateTimeField()

    class Meta:
        ordering = ["fabric__name"]
        constraints: ClassVar[list[Any]] = [
            models.UniqueConstraint(fields=["group", "fabric"], name="one_scheduler_usage_per_group_and_fabric"),
        ]

    def __str__(self) -> str:
        return f"{self.group} on {self.fabric} ({self.account})"
