from django.contrib import admin

from portal.agents.models import AgentAccess, AgentHost, Claim


@admin.register(AgentHost)
class AgentHostAdmin(admin.ModelAdmin[AgentHost]):
    list_display = ["name", "fabric", "state", "gpus", "gpu_model", "last_heartbeat"]
    list_filter = ["fabric", "state"]


@admin.register(Claim)
class ClaimAdmin(admin.ModelAdmin[Claim]):
    list_display = ["run_id", "fabric", "queue", "state", "host", "started_at", "finished_at"]
    list_filter = ["fabric", "state"]
    readonly_fields = ["log"]


@admin.register(AgentAccess)
class AgentAccessAdmin(admin.ModelAdmin[AgentAccess]):
    list_display = ["service", "fabric"]
