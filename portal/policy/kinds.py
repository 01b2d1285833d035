"""The kinds of policy object the admin API and policy documents speak of, each on the admin's own form.

One rule for every road: an object is validated by the very ModelForm the admin page uses (portal/queues/admin.py,
portal/accounts/admin.py, portal/burst/admin.py), bound with the same values the page would post, so the API,
`gridlane policy apply` and the admin can never disagree on what is valid. The form's own fields, in the form's
own units (GPUs, GB, minutes), are an object's fields here; related objects are named by their natural keys
(a team's slug, a fabric's name) instead of database ids.

Every kind has a key: the natural key that names one object in a URL and in a policy document, e.g. `vision`
(a team), `train.h100` (queue train's target on fabric h100), `vision.*` (team vision's quota over all fabrics).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from django import forms
from django.db import models
from django.db.models import Q, QuerySet

from portal.accounts.admin import ResourceGroupForm
from portal.accounts.models import ResourceGroup
from portal.burst.admin import BurstPoolForm
from portal.burst.models import BurstPool, InstanceType
from portal.queues.admin import FabricForm, PriorityTierForm, ProfileForm, QueueForm, QuotaForm
from portal.queues.models import Fabric, PriorityTier, Profile, Queue, QueueTarget, Quota

ALL_FABRICS = "*"  # a quota's key names no fabric with this: the team's cap over all fabrics together


class TargetForm(forms.ModelForm[QueueTarget]):
    """The fields the admin's queue page edits for each target (its inline's default form)."""

    class Meta:
        model = QueueTarget
        fields = ["queue", "fabric", "order", "template", "native", "runs_scripts"]


class InstanceTypeForm(forms.ModelForm[InstanceType]):
    """The fields the admin's burst pool page edits for each instance type (its inline's default form)."""

    class Meta:
        model = InstanceType
        fields = ["pool", "name", "gpu_model", "gpus", "cpus", "memory_gib", "price_on_demand", "price_spot"]


class PoolForm(BurstPoolForm):
    """The admin's burst pool form without its `queues` box: which queues burst to a pool is the pool's fabric
    among their targets, and targets say that in a policy document."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        del self.fields["queues"]


def _split(key: str, what: str) -> tuple[str, str]:
    first, dot, second = key.partition(".")
    if not dot or not first or not second:
        raise LookupError(f"Name a {what} as FIRST.SECOND.")
    return first, second


def _quota_lookup(key: str) -> Q:
    team, fabric = _split(key, "quota (team.fabric, or team.* for all fabrics)")
    return Q(group__slug=team) & (Q(fabric__isnull=True) if fabric == ALL_FABRICS else Q(fabric__name=fabric))


def _target_lookup(key: str) -> Q:
    queue, fabric = _split(key, "target (queue.fabric)")
    return Q(queue__slug=queue, fabric__name=fabric)


def _instance_type_lookup(key: str) -> Q:
    pool, name = _split(key, "instance type (pool.name)")
    return Q(pool__fabric__name=pool, name=name)


@dataclass(frozen=True)
class Kind:
    """One kind of policy object: its model, the admin's form, how its key reads and how its relations are named.

    `relations`: form field -> the related model's field that names it (its natural key).
    `units`: form field -> the unit a policy document's comment gives it.
    `order`: the kinds it needs to exist first (apply creates in this order, deletes in reverse)."""

    name: str
    model: type[models.Model]
    form: type[forms.ModelForm[Any]]
    key: Callable[[Any], str]
    lookup: Callable[[str], Q]
    relations: Mapping[str, str]
    queryset: Callable[[], QuerySet[Any]]
    units: Mapping[str, str] = field(default_factory=dict)
    fixed: tuple[str, ...] = ()  # fields that cannot change once the object exists
    key_fields: tuple[str, ...] = ("name",)  # the fields whose values, joined by ".", make its key

    def key_of(self, values: Mapping[str, Any]) -> str:
        """The key of an object with these field values (as `key` gives it for an object in the database)."""
        return ".".join(ALL_FABRICS if values.get(f) is None else str(values.get(f)) for f in self.key_fields)

    def get(self, key: str) -> Any:
        """The object under this key, or None."""
        try:
            where = self.lookup(key)
        except LookupError:
            return None
        return self.queryset().filter(where).first()

    def read(self, obj: Any) -> dict[str, Any]:
        """The object's fields as its admin form shows them, relations by natural key, in plain JSON values."""
        bound = self.form(instance=obj)
        out: dict[str, Any] = {}
        for name, form_field in bound.fields.items():
            if name in self.relations:
                out[name] = _related(obj, name, self.relations[name], form_field)
                continue
            out[name] = plain(bound.get_initial_for_field(form_field, name))
        return out

    def defaults(self) -> dict[str, Any]:
        """What a new object's fields start as (the model's defaults, as the admin's empty form shows them)."""
        bound = self.form(instance=self.model())
        return {
            name: None if name in self.relations else plain(bound.get_initial_for_field(f, name))
            for name, f in bound.fields.items()
        }

    def bind(self, values: Mapping[str, Any], instance: Any = None) -> forms.ModelForm[Any]:
        """The admin's form bound with these values (relations by natural key), as the admin page posts them."""
        data: dict[str, Any] = {}
        bound = self.form(data=data, instance=instance)
        for name, form_field in bound.fields.items():
            value = values.get(name)
            if isinstance(form_field, forms.JSONField) and not isinstance(value, str) and value is not None:
                value = json.dumps(value)  # the admin's textarea posts JSON text
            if name in self.relations:
                form_field.to_field_name = self.relations[name]  # type: ignore[attr-defined]
                if value is not None and not isinstance(value, list):
                    value = str(value)
            if value is None or (value is False and isinstance(form_field, forms.BooleanField)):
                continue  # as an empty input or an unticked box
            data[name] = value
        return bound


def _related(obj: Any, name: str, to_field: str, form_field: forms.Field) -> Any:
    if isinstance(form_field, forms.ModelMultipleChoiceField):
        return sorted(str(_natural(o, to_field)) for o in getattr(obj, name).all())
    related = getattr(obj, name, None)
    return None if related is None else str(_natural(related, to_field))


def _natural(obj: Any, path: str) -> Any:
    for part in path.split("__"):
        obj = getattr(obj, part)
    return obj


def plain(value: Any) -> Any:
    """A form's initial value as plain JSON: decimals as numbers, a callable's value, lists and dicts as they are."""
    if callable(value):
        value = value()
    if isinstance(value, Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    return value


def _quota_key(quota: Quota) -> str:
    return f"{quota.group.slug}.{quota.fabric.name if quota.fabric is not None else ALL_FABRICS}"


GPUS, CPUS, GB = "GPUs (fractions allowed, e.g. 0.25)", "CPUs", "GB"
MILLI = "milli-units: 1000 = one"
PRICE = "per hour, in the site's currency; empty: not charged"

KINDS: dict[str, Kind] = {
    kind.name: kind
    for kind in (
        Kind(
            "fabrics", Fabric, FabricForm, key=lambda f: f.name, lookup=lambda k: Q(name=k), relations={},
            queryset=lambda: Fabric.objects.all(),
            units={"gpus_milli": f"GPUs, {MILLI}", "cpus_milli": f"CPUs, {MILLI}", "memory_mib": "MiB",
                   "gpu_hour_price": PRICE, "cpu_hour_price": PRICE, "memory_gb_hour_price": f"per GB, {PRICE}",
                   "settings": "connection settings: references only (key_file, kubeconfig context), no secrets"},
        ),
        Kind(
            "teams", ResourceGroup, ResourceGroupForm, key=lambda g: g.slug, lookup=lambda k: Q(slug=k),
            relations={"parent": "slug"}, queryset=lambda: ResourceGroup.objects.select_related("parent"),
            units={"wait_slo_seconds": "seconds: the p95 queue-wait objective", "parent": "its department",
                   "member_gpu_limit": f"{GPUS}; empty: no cap", "fair_share_weight": "relative weight"},
            key_fields=("slug",),
        ),
        Kind(
            "queues", Queue, QueueForm, key=lambda q: q.slug, lookup=lambda k: Q(slug=k),
            relations={"allowed_groups": "slug"}, queryset=lambda: Queue.objects.prefetch_related("allowed_groups"),
            units={"default_runtime_minutes": "minutes", "max_runtime_minutes": "minutes",
                   "gpu_share_percent": "% of each target fabric's GPUs; empty: no cap",
                   "notebook_idle_minutes": "minutes; empty or 0: never", "gpu_idle_grace_minutes": "minutes",
                   "pullback_patience_seconds": "seconds; empty: the site's GRIDLANE_PULLBACK_PATIENCE_SECONDS"},
            key_fields=("slug",),
        ),
        Kind(
            "targets", QueueTarget, TargetForm, key=lambda t: f"{t.queue.slug}.{t.fabric.name}", lookup=_target_lookup,
            relations={"queue": "slug", "fabric": "name"},
            queryset=lambda: QueueTarget.objects.select_related("queue", "fabric"),
            units={"order": "tried in this order, lowest first", "template": "empty: the fabric's default"},
            key_fields=("queue", "fabric"),
        ),
        Kind(
            "quotas", Quota, QuotaForm, key=_quota_key, lookup=_quota_lookup,
            relations={"group": "slug", "fabric": "name"},
            queryset=lambda: Quota.objects.select_related("group", "fabric"),
            units={"gpu_reservation": GPUS, "gpu_limit": f"{GPUS}; empty: no cap", "cpu_reservation": CPUS,
                   "cpu_limit": f"{CPUS}; empty: no cap", "memory_reservation_gb": GB,
                   "memory_limit_gb": f"{GB}; empty: no cap", "fabric": "empty: a cap over all fabrics together"},
            key_fields=("group", "fabric"),
        ),
        Kind(
            "tiers", PriorityTier, PriorityTierForm, key=lambda t: t.slug, lookup=lambda k: Q(slug=k),
            relations={"allowed_groups": "slug"},
            queryset=lambda: PriorityTier.objects.prefetch_related("allowed_groups"),
            units={"weight": "Q in the priority formula", "order": "lower first"}, fixed=("slug",),
            key_fields=("slug",),
        ),
        Kind(
            "profiles", Profile, ProfileForm, key=lambda p: p.name, lookup=lambda k: Q(name=k),
            relations={"queues": "slug"}, queryset=lambda: Profile.objects.prefetch_related("queues"),
            units={"gpus": GPUS, "cpus": CPUS, "memory_gb": GB, "hours": "hours; empty: the queue's default"},
        ),
        Kind(
            "burst-pools", BurstPool, PoolForm, key=lambda p: p.fabric.name, lookup=lambda k: Q(fabric__name=k),
            relations={"fabric": "name", "agent_group": "slug"},
            queryset=lambda: BurstPool.objects.select_related("fabric", "agent_group"),
            units={"credentials": "a reference (env:PREFIX or file:NAME), never the key",
                   "budget_per_hour": "site currency", "budget_per_month": "site currency",
                   "max_idle_minutes": "minutes", "boot_timeout_minutes": "minutes", "burst_after_minutes": "minutes",
                   "orphan_grace_minutes": "minutes"},
            key_fields=("fabric",),
        ),
        Kind(
            "instance-types", InstanceType, InstanceTypeForm, key=lambda t: f"{t.pool.fabric.name}.{t.name}",
            lookup=_instance_type_lookup, relations={"pool": "fabric__name"},
            queryset=lambda: InstanceType.objects.select_related("pool__fabric"),
            units={"memory_gib": "GiB", "price_on_demand": "per hour", "price_spot": "per hour; empty: no spot"},
            key_fields=("pool", "name"),
        ),
    )
}  # fmt: skip
