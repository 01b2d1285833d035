from __future__ import annotations

from decimal import Decimal
from typing import Any

from django import forms
from django.contrib import admin
from django.contrib.auth.models import Group
from django.db.models import Q, QuerySet
from django.http import HttpRequest

from portal import words
from portal.accounts import tokens
from portal.accounts.models import (
    ApiToken,
    AuditEvent,
    ClaimMapping,
    ExternalIdentity,
    Membership,
    PosixAccount,
    PosixPolicy,
    ResourceGroup,
    SchedulerAccount,
    ServiceIdentity,
)

# Django's permission groups play no part in Gridlane (teams, claim mappings and IT staff do): hidden, so that
# the admin speaks of teams only.
admin.site.unregister(Group)


class MembershipInline(admin.TabularInline[Membership, ResourceGroup]):
    model = Membership
    extra = 1
    autocomplete_fields = ["user"]


class ClaimMappingInline(admin.TabularInline[ClaimMapping, ResourceGroup]):
    model = ClaimMapping
    extra = 0
    fields = ["claim_value", "role", "makes_it_staff"]


class ResourceGroupForm(forms.ModelForm[ResourceGroup]):
    """The member cap in GPUs, as quotas are given (stored in milli-GPUs)."""

    member_gpu_limit = forms.DecimalField(
        label="GPU limit per member",
        min_value=Decimal("0.001"),
        decimal_places=3,
        required=False,
        help_text="GPUs any one person may hold in this team at once, over all fabrics, e.g. 2; agents keep their "
        "own limits. Empty: no cap.",
    )

    class Meta:
        model = ResourceGroup
        fields = ["slug", "name", "parent", "fair_share_weight", "wait_slo_seconds"]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        milli = self.instance.member_gpu_limit_milli
        self.initial["member_gpu_limit"] = None if milli is None else (Decimal(milli) / 1000).normalize()

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        gpus = data.get("member_gpu_limit")
        milli = None if gpus is None else int(gpus * 1000)
        _, limit = self.instance.gpu_quota_milli() if self.instance.pk else (0, None)
        if milli is not None and limit is not None and milli > limit:
            self.add_error("member_gpu_limit", f"Above the team's own limit ({words.gpus(Decimal(limit) / 1000)}).")
            return data
        self.instance.member_gpu_limit_milli = milli
        return data


@admin.register(ResourceGroup)
class ResourceGroupAdmin(admin.ModelAdmin[ResourceGroup]):
    form = ResourceGroupForm
    list_display = ["slug", "name", "parent", "fair_share_weight", "wait_slo_seconds", "member_gpu_limit_milli"]
    search_fields = ["slug", "name"]
    prepopulated_fields = {"slug": ["name"]}
    inlines = [ClaimMappingInline, MembershipInline]


@admin.register(ClaimMapping)
class ClaimMappingAdmin(admin.ModelAdmin[ClaimMapping]):
    """Which value of the provider's groups claim means which team and role, or IT staff. Applied at each sign-in."""

    list_display = ["claim_value", "group", "role", "makes_it_staff"]
    list_filter = ["makes_it_staff", "role", "group"]
    search_fields = ["claim_value", "group__slug"]


@admin.register(ExternalIdentity)
class ExternalIdentityAdmin(admin.ModelAdmin[ExternalIdentity]):
    list_display = ["user", "subject", "issuer", "synced_at"]
    search_fields = ["user__username", "subject"]
    readonly_fields = ["user", "issuer", "subject", "groups", "synced_at"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # made by signing in


@admin.register(ServiceIdentity)
class ServiceIdentityAdmin(admin.ModelAdmin[ServiceIdentity]):
    """Agents. Create them from the Agents page, where their first token is shown once."""

    list_display = ["name", "group", "expires_at", "rate_limit_per_minute", "gpu_reservation_milli", "disabled_at"]
    list_filter = ["group"]
    search_fields = ["user__username", "description"]
    filter_horizontal = ["allowed_queues"]
    readonly_fields = ["user", "created_by", "created_at"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin[ApiToken]):
    """Tokens are read-only here; IT revokes them with the action, which the audit log records."""

    list_display = ["name", "user", "hint", "scopes", "created_at", "last_used_at", "expires_at", "revoked_at"]
    list_filter = ["revoked_at"]
    search_fields = ["name", "user__username", "hint"]
    readonly_fields = [
        "user", "name", "hint", "scopes", "created_at", "created_by", "last_used_at", "expires_at", "revoked_at",
    ]  # fmt: skip
    actions = ["revoke"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # tokens are issued where the plaintext can be shown once, never typed in here

    @admin.display(description="scopes")
    def scopes(self, token: ApiToken) -> str:
        """Fixed when it was issued: read-only, its actions, its queues, its cap; "full access" without any."""
        return token.scope_summary

    def has_delete_permission(self, request: HttpRequest, obj: ApiToken | None = None) -> bool:
        return False  # revoke instead: the row is what shows the token was used and by whom

    @admin.action(description="Revoke the selected tokens")
    def revoke(self, request: HttpRequest, queryset: QuerySet[ApiToken]) -> None:
        revoked = sum(tokens.revoke(token, by=request.user) for token in queryset.select_related("user"))
        self.message_user(request, f"Revoked {revoked} token(s).")


class AuditKindFilter(admin.SimpleListFilter):
    """By what the event is about: the part of the action before the dot (signin, token, queue, ...)."""

    title = "kind"
    parameter_name = "kind"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        actions = AuditEvent.objects.values_list("action", flat=True).distinct()
        kinds = sorted({action.split(".", 1)[0] for action in actions})
        return [(kind, kind) for kind in kinds]

    def queryset(self, request: HttpRequest, queryset: QuerySet[AuditEvent]) -> QuerySet[AuditEvent]:
        if self.value():
            return queryset.filter(action__startswith=f"{self.value()}.") | queryset.filter(action=self.value())
        return queryset


# Routine events, folded unless asked for: every sign-in, sign-out and token use.
ROUTINE = Q(action__in=["signin", "signout", "token.used"])


class RoutineFilter(admin.SimpleListFilter):
    """Sign-ins, sign-outs and token use are most of the log: folded by default, one click to show them."""

    title = "routine events"
    parameter_name = "routine"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [("shown", "Shown"), ("only", "Only these")]

    def choices(self, changelist: Any) -> Any:
        for choice in super().choices(changelist):
            if choice["display"] == "All":
                choice["display"] = "Folded"
            yield choice

    def queryset(self, request: HttpRequest, queryset: QuerySet[AuditEvent]) -> QuerySet[AuditEvent]:
        if self.value() == "only":
            return queryset.filter(ROUTINE)
        if self.value() == "shown" or request.GET.get("kind") in ("signin", "signout", "token"):
            return queryset
        return queryset.exclude(ROUTINE)


class ActorFilter(admin.SimpleListFilter):
    """By who did it (the name is kept when the account is gone)."""

    title = "actor"
    parameter_name = "actor"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        # Ordered by the name itself: the model's own order (by time) would make each (name, time) distinct.
        names = (
            AuditEvent.objects.exclude(actor_name="")
            .order_by("actor_name")
            .values_list("actor_name", flat=True)
            .distinct()[:200]
        )
        return [(name, name) for name in names]

    def queryset(self, request: HttpRequest, queryset: QuerySet[AuditEvent]) -> QuerySet[AuditEvent]:
        return queryset.filter(actor_name=self.value()) if self.value() else queryset


class TeamFilter(admin.SimpleListFilter):
    """By team: workload events carry it; policy changes name it (a quota "Vision on local", a team itself)."""

    title = "team"
    parameter_name = "team"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [(g.slug, g.name) for g in ResourceGroup.objects.order_by("name")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[AuditEvent]) -> QuerySet[AuditEvent]:
        if not self.value():
            return queryset
        team = ResourceGroup.objects.filter(slug=self.value()).first()
        if team is None:
            return queryset.none()
        return queryset.filter(
            Q(detail__team=team.slug) | Q(target=team.name) | Q(target__startswith=f"{team.name} on ")
        )


@admin.register(AuditEvent)
class AuditEventAdmin(admin.ModelAdmin[AuditEvent]):
    """The audit log, read-only: who did what, and for policy changes the values before and after. Filter by
    kind, actor, team and object (search); sign-ins and token use are folded until asked for."""

    list_display = ["at", "action", "actor_name", "target"]
    list_filter = [RoutineFilter, AuditKindFilter, ActorFilter, TeamFilter, "at"]
    search_fields = ["target", "actor_name", "action"]
    search_help_text = "Search by object (a workload's name or id, a queue, a quota), actor or action."
    date_hierarchy = "at"
    readonly_fields = ["at", "actor", "actor_name", "action", "target", "detail"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: AuditEvent | None = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: AuditEvent | None = None) -> bool:
        return False


@admin.register(PosixPolicy)
class PosixPolicyAdmin(admin.ModelAdmin[PosixPolicy]):
    """Which fabrics run jobs as their owners, and how a signed-in person's POSIX user name is found there."""

    list_display = ["fabric", "claim", "pattern", "replacement", "default_account"]
    search_fields = ["fabric__name", "claim"]


@admin.register(PosixAccount)
class PosixAccountAdmin(admin.ModelAdmin[PosixAccount]):
    """Explicit POSIX users: exceptions to a policy's claim, and the accounts IT gives agents."""

    list_display = ["user", "posix_user", "fabric"]
    list_filter = ["fabric"]
    search_fields = ["user__username", "posix_user"]
    autocomplete_fields = ["user"]


@admin.register(SchedulerAccount)
class SchedulerAccountAdmin(admin.ModelAdmin[SchedulerAccount]):
    """The Slurm account (PBS project) each team's jobs are charged to, per fabric."""

    list_display = ["group", "fabric", "account"]
    list_filter = ["fabric"]
    search_fields = ["group__slug", "account"]
