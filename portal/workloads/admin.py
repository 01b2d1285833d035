from django.contrib import admin

from portal.workloads.models import Workload, WorkloadEvent


class WorkloadEventInline(admin.TabularInline[WorkloadEvent, Workload]):
    model = WorkloadEvent
    extra = 0
    can_delete = False
    readonly_fields = ["at", "actor", "from_state", "to_state", "reason"]


@admin.register(Workload)
class WorkloadAdmin(admin.ModelAdmin[Workload]):
    """Read-only: workloads change state through the services, never by hand."""

    list_display = [
        "name",
        "state",
        "queue",
        "group",
        "owner",
        "gpus_milli",
        "nodes",
        "submitted_at",
        "fabric",
    ]
    list_filter = ["state", "kind", "queue", "group", "fabric"]
    search_fields = ["name", "id", "owner__username", "external_id"]
    list_select_related = ["queue", "group", "owner", "fabric"]
    inlines = [WorkloadEventInline]
    # A notebook's link and reported server carry its token: that is its owner's, not IT's.
    exclude = ["connect_url", "notebook_endpoint"]

    def has_add_permission(self, request: object) -> bool:
        return False

    def has_change_permission(self, request: object, obj: object = None) -> bool:
        return False
