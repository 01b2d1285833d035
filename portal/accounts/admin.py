from django.contrib import admin

from portal.accounts.models import ApiToken, AuditEvent, Membership, ResourceGroup


class MembershipInline(admin.TabularInline[Membership, ResourceGroup]):
    model = Membership
    extra = 1
    autocomplete_fields = ["user"]


@admin.register(ResourceGroup)
class ResourceGroupAdmin(admin.ModelAdmin[ResourceGroup]):
    list_display = ["slug", "name", "parent", "oidc_group", "fair_share_weight", "wait_slo_seconds"]
    search_fields = ["slug", "name", "oidc_group"]
    prepopulated_fields = {"slug": ["name"]}
    inlines = [MembershipInline]


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin[ApiToken]):
    list_display = ["name", "user", "hint", "created_at", "last_used_at", "expires_at", "revoked_at"]
    list_filter = ["revoked_at"]
    search_fields = ["name", "user__username", "hint"]
    readonly_fields = ["hint", "created_at", "last_used_at"]

    def has_add_permission(self, request: object) -> bool:
        return False  # tokens are issued where the plaintext can be shown once, never typed in here


@admin.register(AuditEvent)
class AuditEventAdmin(admin.ModelAdmin[AuditEvent]):
    list_display = ["at", "action", "actor", "target"]
    list_filter = ["action"]
    search_fields = ["target", "actor__username"]
    readonly_fields = ["at", "actor", "action", "target", "detail"]
