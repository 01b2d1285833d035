"""Burst pools: an agent fabric whose hosts are cloud instances an autoscaler launches when work waits for
capacity, and terminates when it does not; the instances, their enrollment tokens, and the autoscaler's
decisions with their reasons."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from datetime import datetime
from decimal import Decimal
from typing import Any, ClassVar

from django.core.exceptions import ValidationError
from django.core.validators import MinValueValidator, RegexValidator
from django.db import models
from django.utils import timezone

from fabrics.cloud import bootscript
from fabrics.cloud.base import check_reference
from fabrics.cloud.openstack import keystone_v3
from fabrics.cloud.registry import PROVIDERS

INSTANCE_TYPE = re.compile(r"^[a-z0-9][a-z0-9-]*(\.[a-z0-9-]+)+$")  # EC2's: g5.12xlarge, p4d.24xlarge
FLAVOR = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,59}$")  # any provider's: OpenStack flavors are named freely
ZONE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,39}$")  # eu-west-1a; OpenStack's "nova", "AZ-2"
REGION = ZONE  # eu-west-1; OpenStack's "RegionOne"
EC2_REGION = re.compile(r"^[a-z0-9-]{1,40}$")


def validate_reference(value: str) -> None:
    try:
        check_reference(value)
    except ValueError as error:
        raise ValidationError(str(error)) from error


def validate_zones(value: Any) -> None:
    if not isinstance(value, list) or not value or not all(isinstance(z, str) and ZONE.match(z) for z in value):
        raise ValidationError('Give the zones to try, in order, as a list: ["eu-west-1a", "eu-west-1b"].')


def validate_boot_script(value: str) -> None:
    try:
        bootscript.check(value)
    except bootscript.BootScriptError as error:
        raise ValidationError(str(error)) from error


def validate_budget(value: Decimal) -> None:
    if value is not None and value <= 0:
        raise ValidationError("A budget of zero would never let an instance start; switch the pool off instead.")


class BurstPool(models.Model):
    """An agent fabric with an autoscaler: what it may launch, where, for which queues, and what it may spend."""

    fabric = models.OneToOneField(
        "queues.Fabric", on_delete=models.CASCADE, related_name="burst_pool", limit_choices_to={"kind": "agent"},
        help_text="The agent fabric its instances serve. Queues burst to it by naming it as their last target.",
    )  # fmt: skip
    provider = models.CharField(max_length=20, choices=[(k, k) for k in PROVIDERS], default="ec2")
    credentials = models.CharField(
        max_length=120, validators=[validate_reference],
        help_text='A reference, never the key: "env:PREFIX" (EC2: PREFIX_ACCESS_KEY_ID and PREFIX_SECRET_ACCESS_KEY; '
        "OpenStack: PREFIX_APPLICATION_CREDENTIAL_ID and PREFIX_APPLICATION_CREDENTIAL_SECRET, in the worker's "
        'environment) or "file:NAME" (a file in GRIDLANE_CREDENTIALS_DIR).',
    )  # fmt: skip
    region = models.CharField(max_length=40, validators=[RegexValidator(REGION)])
    zones = models.JSONField(default=list, blank=True, validators=[validate_zones], help_text="Tried in order.")
    endpoint_url = models.URLField(
        blank=True, help_text="EC2: empty for the region's public endpoint. OpenStack: Keystone's auth URL (.../v3)."
    )
    image = models.CharField(max_length=200, help_text="The image instances boot: ami-... on EC2, its id on OpenStack.")
    spot = models.BooleanField(default=False, help_text="Spot instances: cheaper, and the provider may reclaim them.")
    boot_script = models.TextField(
        default=bootscript.DEFAULT, validators=[validate_boot_script],
        help_text="Cloud-init user data: a shell script or #cloud-config. Placeholders: {{server}}, {{token}}, "
        "{{name}}, {{queue_args}} (already shell-quoted).",
    )  # fmt: skip
    server_url = models.URLField(help_text="Where instances reach Gridlane to enroll and claim work.")
    agent_group = models.ForeignKey(
        "accounts.ResourceGroup", on_delete=models.PROTECT, related_name="+",
        help_text="The team the instances' agent identities belong to (usually IT's).",
    )  # fmt: skip
    min_instances = models.PositiveSmallIntegerField(default=0)
    max_instances = models.PositiveSmallIntegerField(default=4, validators=[MinValueValidator(1)])
    max_idle_minutes = models.PositiveIntegerField(default=10, validators=[MinValueValidator(1)])
    boot_timeout_minutes = models.PositiveIntegerField(default=15, validators=[MinValueValidator(1)])
    burst_after_minutes = models.PositiveIntegerField(
        default=10,
        help_text="Launch only for work the scheduler expects to wait longer than this where it waits now; work "
        "that will start on premises sooner is left to do so. 0: burst for any work that waits for capacity.",
    )
    orphan_grace_minutes = models.PositiveIntegerField(
        default=15, help_text="How long an instance tagged with this pool that Gridlane has no record of may run."
    )
    budget_per_hour = models.DecimalField(
        max_digits=10, decimal_places=2, validators=[validate_budget], help_text="Never exceeded."
    )
    budget_per_month = models.DecimalField(
        max_digits=12, decimal_places=2, validators=[validate_budget], help_text="Never exceeded."
    )
    enabled = models.BooleanField(default=True)

    class Meta:
        ordering = ["fabric__name"]

    def __str__(self) -> str:
        return f"burst pool {self.fabric.name}"

    @property
    def name(self) -> str:
        return self.fabric.name

    def clean(self) -> None:
        if not self.zones:  # Django skips field validators for an empty list
            validate_zones(self.zones)
        errors = dict(self.provider_errors())
        if self.min_instances > self.max_instances:
            errors["min_instances"] = "The minimum cannot be above the maximum."
        if errors:
            raise ValidationError(errors)

    def provider_errors(self) -> Iterator[tuple[str, str]]:
        """What the chosen provider cannot take, by field."""
        if self.provider == "ec2" and not EC2_REGION.match(self.region or ""):
            yield "region", "EC2 regions are lower case, e.g. eu-west-1."
        if self.provider != "openstack":
            return
        if not self.endpoint_url:
            yield "endpoint_url", 'OpenStack needs Keystone\'s auth URL, e.g. "https://keystone.example:5000/v3".'
        else:
            try:
                keystone_v3(self.endpoint_url)
            except ValueError as error:
                yield "endpoint_url", str(error)
        try:
            uuid.UUID(self.image or "")
        except ValueError:
            yield "image", "Give the image's id (openstack image list shows it): Nova boots an image by its id."
        if self.spot:
            yield "spot", "OpenStack has no spot market: switch spot off."


class InstanceType(models.Model):
    """An instance type a pool may launch, with what it holds and what it costs."""

    pool = models.ForeignKey(BurstPool, on_delete=models.CASCADE, related_name="instance_types")
    name = models.CharField(max_length=60, validators=[RegexValidator(FLAVOR)], help_text="EC2's instance type, or "
                            "OpenStack's flavor name.")  # fmt: skip
    gpu_model = models.CharField(max_length=40, blank=True, help_text="e.g. a10g, a100-80g")
    gpus = models.PositiveSmallIntegerField(default=1)
    cpus = models.PositiveSmallIntegerField(validators=[MinValueValidator(1)])
    memory_gib = models.PositiveIntegerField(validators=[MinValueValidator(1)])
    price_on_demand = models.DecimalField("on-demand per hour", max_digits=8, decimal_places=4,
                                          validators=[MinValueValidator(Decimal("0.0001"))])  # fmt: skip
    price_spot = models.DecimalField("spot per hour", max_digits=8, decimal_places=4, null=True, blank=True,
                                     validators=[MinValueValidator(Decimal("0.0001"))])  # fmt: skip

    class Meta:
        ordering = ["pool", "price_on_demand", "name"]
        constraints: ClassVar[list[Any]] = [
            models.UniqueConstraint(fields=["pool", "name"], name="one_instance_type_per_name")
        ]

    def __str__(self) -> str:
        return self.name

    def clean(self) -> None:
        pool = getattr(self, "pool", None)  # None in a new pool's inline: the form checks it once saved
        if pool is not None and pool.provider == "ec2" and not INSTANCE_TYPE.match(self.name or ""):
            raise ValidationError({"name": "EC2 instance types look like g5.12xlarge."})

    def price(self, spot: bool) -> Decimal:
        return self.price_spot if spot and self.price_spot is not None else self.price_on_demand


class Instance(models.Model):
    """One instance the autoscaler meant to launch, from the intent (recorded first) to its end."""

    class State(models.TextChoices):
        PENDING = "pending"  # intent recorded; the provider may or may not have it yet
        BOOTING = "booting"  # the provider launched it; its agent has not enrolled yet
        ENROLLED = "enrolled"  # its agent registered, no work yet
        BUSY = "busy"
        IDLE = "idle"
        TERMINATING = "terminating"
        GONE = "gone"
        ORPHAN = "orphan"  # tagged with the pool, no record of ours: reported, terminated after a grace period

    pool = models.ForeignKey(BurstPool, on_delete=models.CASCADE, related_name="instances")
    launch_id = models.UUIDField(unique=True, null=True, blank=True)
    attempt = models.PositiveSmallIntegerField(default=0, help_text="Which try (type or zone) the token names.")
    instance_type = models.CharField(max_length=60)
    zone = models.CharField(max_length=40, blank=True)
    spot = models.BooleanField(default=False)
    price_per_hour = models.DecimalField(max_digits=8, decimal_places=4, default=Decimal(0))
    gpus = models.PositiveSmallIntegerField(default=0)
    cpus = models.PositiveSmallIntegerField(default=0)
    memory_gib = models.PositiveIntegerField(default=0)
    state = models.CharField(max_length=12, choices=State.choices, default=State.PENDING)
    provider_id = models.CharField(max_length=100, blank=True)
    host_name = models.CharField(max_length=200, blank=True)
    requested_at = models.DateTimeField(default=timezone.now)
    launched_at = models.DateTimeField(null=True, blank=True)
    enrolled_at = models.DateTimeField(null=True, blank=True)
    idle_since = models.DateTimeField(null=True, blank=True)
    terminate_requested_at = models.DateTimeField(null=True, blank=True)
    gone_at = models.DateTimeField(null=True, blank=True)
    reason = models.CharField(max_length=300, blank=True, help_text="Why it was launched, or why it ended.")
    demand = models.JSONField(default=list, blank=True, help_text="The waiting workloads it was launched for.")

    class Meta:
        ordering = ["-requested_at", "pk"]
        indexes: ClassVar[list[Any]] = [models.Index(fields=["pool", "state"])]

    def __str__(self) -> str:
        return f"{self.instance_type} {self.provider_id or self.launch_id} ({self.state})"

    @property
    def live(self) -> bool:
        return self.state not in (Instance.State.GONE,)

    def cost(self, now: datetime) -> Decimal:
        """What it has cost so far: its hourly price from launch to its end (or now)."""
        if self.launched_at is None:
            return Decimal(0)
        end = self.gone_at or now
        hours = Decimal(max(0.0, (end - self.launched_at).total_seconds())) / Decimal(3600)
        return (self.price_per_hour * hours).quantize(Decimal("0.0001"))


class EnrollmentToken(models.Model):
    """The one-time token an instance's boot script enrolls its agent with; stored hashed, expiring."""

    instance = models.OneToOneField(Instance, on_delete=models.CASCADE, related_name="enrollment")
    token_hash = models.CharField(max_length=64, unique=True)
    expires_at = models.DateTimeField()
    used_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"enrollment of {self.instance_id}"


class Decision(models.Model):
    """What the autoscaler did and why, in words IT reads on the burst page."""

    class Action(models.TextChoices):
        LAUNCH = "launch"
        TERMINATE = "terminate"
        HOLD = "hold"  # demand it did not launch for (budget, maximum)
        FAIL = "fail"  # the provider refused (credentials, a bad type, capacity everywhere)
        REPLACE = "replace"  # a spot instance was reclaimed
        ORPHAN = "orphan"

    pool = models.ForeignKey(BurstPool, on_delete=models.CASCADE, related_name="decisions")
    at = models.DateTimeField(default=timezone.now)
    action = models.CharField(max_length=10, choices=Action.choices)
    instance = models.ForeignKey(Instance, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    message = models.CharField(max_length=500)

    class Meta:
        ordering = ["-at", "-pk"]
        indexes: ClassVar[list[Any]] = [models.Index(fields=["pool", "-at"])]

    def __str__(self) -> str:
        return self.message


class Cooldown(models.Model):
    """An instance type the pool does not try until `until`, in one zone, or in every zone where `zone` is blank:
    the provider had no capacity for it there, or does not know it. Kept in the database, so that a restarted
    worker, or another worker process, does not try it again at once."""

    class Why(models.TextChoices):
        CAPACITY = "capacity", "no capacity"
        INVALID = "invalid", "unknown to the provider"

    pool = models.ForeignKey(BurstPool, on_delete=models.CASCADE, related_name="cooldowns")
    instance_type = models.CharField(max_length=60)
    zone = models.CharField(max_length=40, blank=True, help_text="Blank: every zone.")
    why = models.CharField(max_length=10, choices=Why.choices)
    code = models.CharField(max_length=80, blank=True, help_text="The provider's error code.")
    until = models.DateTimeField()

    class Meta:
        ordering = ["pool", "until", "instance_type", "zone"]
        constraints: ClassVar[list[Any]] = [
            models.UniqueConstraint(fields=["pool", "instance_type", "zone"], name="one_cooldown_per_type_and_zone")
        ]

    def __str__(self) -> str:
        where = f" in {self.zone}" if self.zone else ""
        return f"{self.instance_type}{where}: {self.get_why_display()}, retry after {self.until:%H:%M}"
