"""Burst pools in the admin: every change is audited (portal.accounts.audit), credentials are a reference."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest

from portal.burst.models import BurstPool, Decision, Instance, InstanceType
from portal.queues.models import Queue, QueueTarget


class InstanceTypeInline(admin.TabularInline[InstanceType, BurstPool]):
    model = InstanceType
    extra = 1


class BurstPoolForm(forms.ModelForm[BurstPool]):
    queues = forms.ModelMultipleChoiceField(
        Queue.objects.all(), required=False, widget=forms.CheckboxSelectMultiple,
        help_text="Queues that may burst here: the pool's fabric becomes their last target (on-premises first).",
    )  # fmt: skip
    endpoint_url = forms.URLField(assume_scheme="https", required=False, help_text=BurstPool._meta.get_field(
        "endpoint_url").help_text)  # fmt: skip
    server_url = forms.URLField(assume_scheme="https", help_text=BurstPool._meta.get_field("server_url").help_text)

    class Meta:
        model = BurstPool
        fields = [
            "fabric", "provider", "credentials", "region", "zones", "endpoint_url", "image", "spot", "boot_script",
            "server_url", "agent_group", "min_instances", "max_instances", "max_idle_minutes", "boot_timeout_minutes",
            "burst_after_minutes", "orphan_grace_minutes", "budget_per_hour", "budget_per_month", "enabled",
        ]  # fmt: skip

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.instance.pk:
            self.fields["queues"].initial = Queue.objects.filter(targets__fabric_id=self.instance.fabric_id)


def set_burst_queues(pool: BurstPool, queues: QuerySet[Queue] | list[Queue]) -> None:
    """The pool's fabric is the last target of exactly these queues."""
    chosen = {q.pk for q in queues}
    QueueTarget.objects.filter(fabric_id=pool.fabric_id).exclude(queue_id__in=chosen).delete()
    for queue in queues:
        if not QueueTarget.objects.filter(queue=queue, fabric_id=pool.fabric_id).exists():
            last = max((t.order for t in queue.targets.all()), default=-1)
            QueueTarget.objects.create(queue=queue, fabric_id=pool.fabric_id, order=last + 1)


@admin.register(BurstPool)
class BurstPoolAdmin(admin.ModelAdmin[BurstPool]):
    form = BurstPoolForm
    inlines = [InstanceTypeInline]
    list_display = ["fabric", "provider", "region", "min_instances", "max_instances", "budget_per_hour",
                    "budget_per_month", "enabled"]  # fmt: skip

    def save_related(self, request: HttpRequest, form: Any, formsets: Any, change: bool) -> None:
        super().save_related(request, form, formsets, change)
        set_burst_queues(form.instance, list(form.cleaned_data.get("queues") or []))


@admin.register(Instance)
class InstanceAdmin(admin.ModelAdmin[Instance]):
    list_display = ["provider_id", "pool", "instance_type", "state", "zone", "spot", "requested_at", "gone_at"]
    list_filter = ["pool", "state"]
    readonly_fields = [f.name for f in Instance._meta.fields]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # only the autoscaler launches


@admin.register(Decision)
class DecisionAdmin(admin.ModelAdmin[Decision]):
    list_display = ["at", "pool", "action", "message"]
    list_filter = ["pool", "action"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False
