from __future__ import annotations

from django.contrib import admin

from portal.objectives.models import WaitObjective


@admin.register(WaitObjective)
class WaitObjectiveAdmin(admin.ModelAdmin[WaitObjective]):
    list_display = ["slug", "name", "kind", "threshold_minutes", "percent", "days", "enabled", "alert"]
    list_filter = ["kind", "enabled", "alert"]
    fields = ["slug", "name", "kind", "queue", "tier", "team", "threshold_minutes", "percent", "days", "enabled"]
    prepopulated_fields = {"slug": ("name",)}
