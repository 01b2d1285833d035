from django import forms
from django.contrib import admin

from fabrics.registry import KINDS
from portal.queues.models import Fabric, Queue, QueueTarget, Quota


class FabricForm(forms.ModelForm[Fabric]):
    kind = forms.ChoiceField(choices=lambda: [(k, k) for k in sorted(KINDS)])

    class Meta:
        model = Fabric
        fields = ["name", "kind", "enabled", "gpu_flavor", "gpus_milli", "cpus_milli", "memory_mib", "gpu_sharing",
                  "settings"]  # fmt: skip


class QueueTargetInline(admin.TabularInline[QueueTarget, Queue]):
    model = QueueTarget
    extra = 1
    ordering = ["order"]


@admin.register(Queue)
class QueueAdmin(admin.ModelAdmin[Queue]):
    list_display = [
        "slug",
        "name",
        "kinds",
        "default_runtime_minutes",
        "max_runtime_minutes",
        "notebook_idle_minutes",
        "preemptible",
        "enabled",
    ]
    list_filter = ["enabled", "preemptible"]
    filter_horizontal = ["allowed_groups"]
    prepopulated_fields = {"slug": ["name"]}
    inlines = [QueueTargetInline]


class QuotaInline(admin.TabularInline[Quota, Fabric]):
    model = Quota
    extra = 1


@admin.register(Fabric)
class FabricAdmin(admin.ModelAdmin[Fabric]):
    form = FabricForm
    list_display = [
        "name",
        "kind",
        "gpu_flavor",
        "gpus_milli",
        "cpus_milli",
        "memory_mib",
        "enabled",
        "healthy",
    ]
    list_filter = ["kind", "enabled", "healthy"]
    readonly_fields = ["healthy", "health_detail"]
    inlines = [QuotaInline]


@admin.register(Quota)
class QuotaAdmin(admin.ModelAdmin[Quota]):
    list_display = ["group", "fabric", "gpu_reservation_milli", "gpu_limit_milli"]
    list_filter = ["fabric", "group"]
