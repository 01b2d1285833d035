"""Sign-in and sign-out, the account page (teams, personal tokens) and agents (service identities)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any
from urllib.parse import urlencode

from django.conf import settings
from django.contrib import auth, messages
from django.contrib.auth import views as auth_views
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse, HttpResponseBase
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_http_methods, require_POST

from portal import access
from portal.accounts import agents, oidc, tokens
from portal.accounts.forms import AgentForm, TokenForm


def login_view(request: HttpRequest, extra_context: dict[str, object] | None = None) -> HttpResponseBase:
    """Local accounts in demo mode (with the provider beside them when configured); else the provider."""
    if settings.DEMO:
        context = {"demo": True, "oidc": oidc.enabled(), "provider_name": settings.GRIDLANE_OIDC["PROVIDER_NAME"]}
        return auth_views.LoginView.as_view(extra_context=context)(request)
    if request.user.is_authenticated:  # a signed-in person sent to sign in again: no sign-in loop
        return render(request, "registration/not_allowed.html", status=403)
    if oidc.enabled():
        query = urlencode({"next": request.GET["next"]}) if request.GET.get("next") else ""
        return redirect(reverse("oidc_authentication_init") + (f"?{query}" if query else ""))
    return render(request, "registration/no_local_login.html", status=403)


def admin_login_view(request: HttpRequest, extra_context: dict[str, object] | None = None) -> HttpResponseBase:
    """The admin's sign-in: a signed-in person who is not IT gets a plain "IT only" page, not a sign-in form
    that would only lead back here."""
    if request.user.is_authenticated:
        return render(request, "registration/it_only.html", status=403)
    return login_view(request, extra_context)


@require_POST
def logout_view(request: HttpRequest) -> HttpResponseBase:
    """Sign out here, then at the provider too when this session came from it."""
    id_token = request.session.get("oidc_id_token")
    auth.logout(request)
    if id_token and oidc.enabled():
        end_session = oidc.end_session_url(request, str(id_token))
        if end_session:
            return redirect(end_session)
        return redirect("accounts:signed_out")
    return redirect(settings.LOGOUT_REDIRECT_URL)


def signed_out(request: HttpRequest) -> HttpResponse:
    return render(request, "accounts/signed_out.html")


# Sections other apps add to the account page, by name (portal.notify: "notify", what you hear about), each a
# function of the user and its bound form (None: a fresh one) that gives the page's context for it. Filled by
# those apps when they are ready, so that accounts imports none of them.
SECTIONS: dict[str, Callable[[Any, Any], dict[str, Any]]] = {}


def account_page(
    request: HttpRequest,
    form: TokenForm | None = None,
    new_token: str = "",
    status: int = 200,
    section_forms: dict[str, Any] | None = None,
) -> HttpResponse:
    """The account page; `section_forms`: a section's bound form by the section's name (one that was refused),
    where a fresh one would be shown."""
    user = request.user
    context = {
        "memberships": user.memberships.select_related("group").order_by("group__slug"),  # type: ignore[union-attr]
        "tokens": user.api_tokens.all(),  # type: ignore[union-attr]
        "form": form or TokenForm(user=user),
        "new_token": new_token,
        "is_it": access.is_it(user),
    }
    for name, section in SECTIONS.items():
        context |= section(user, (section_forms or {}).get(name))
    response = render(request, "accounts/account.html", context, status=status)
    response["Cache-Control"] = "no-store"  # a new token is on the page once; keep it out of caches
    return response


@login_required
def account(request: HttpRequest) -> HttpResponse:
    return account_page(request)


@login_required
@require_POST
def token_create(request: HttpRequest) -> HttpResponse:
    if not access.may_issue_personal_tokens(request.user):
        return HttpResponse("Agents do not issue tokens.", status=403)
    form = TokenForm(request.POST, user=request.user)
    if not form.is_valid():
        return account_page(request, form, status=422)
    _, plaintext = tokens.issue(
        request.user, form.cleaned_data["name"], form.expires_at(), by=request.user, scope_fields=form.scope_fields
    )
    return account_page(request, new_token=plaintext)


@login_required
@require_POST
def token_revoke(request: HttpRequest, pk: int) -> HttpResponse:
    token = get_object_or_404(request.user.api_tokens, pk=pk)  # type: ignore[union-attr]
    if tokens.revoke(token, by=request.user):
        messages.success(request, f"Revoked the token {token.hint}….")
    return redirect("accounts:home")


# --- Agents -------------------------------------------------------------------------------------------


@login_required
def agent_list(request: HttpRequest) -> HttpResponse:
    context = {
        "agents": access.visible_service_identities(request.user).prefetch_related("allowed_queues"),
        "may_create": access.agent_groups(request.user).exists(),
    }
    return render(request, "accounts/agents.html", context)


@never_cache
@login_required
@require_http_methods(["GET", "POST"])
def agent_new(request: HttpRequest) -> HttpResponse:
    if not access.agent_groups(request.user).exists():
        return HttpResponse("Only team leads and IT create agents.", status=403)
    form = AgentForm(request.POST or None, user=request.user)
    if request.method == "POST" and form.is_valid():
        service, plaintext = agents.create(
            form.save(commit=False), form.cleaned_data["name"], form.cleaned_data["allowed_queues"], by=request.user
        )
        return _agent_page(request, service.pk, new_token=plaintext)
    return render(request, "accounts/agent_new.html", {"form": form}, status=422 if form.errors else 200)


def _agent_page(
    request: HttpRequest,
    pk: int,
    form: AgentForm | None = None,
    new_token: str = "",
    status: int = 200,
    token_form: TokenForm | None = None,
) -> HttpResponse:
    service = access.access_service_identity(request.user, pk)
    manage = access.can_manage_service_identity(request.user, service)
    context = {
        "agent": service,
        "manage": manage,
        "form": form or (AgentForm(instance=service, user=request.user) if manage else None),
        "token_form": (token_form or TokenForm(user=service.user)) if manage else None,
        "tokens": service.user.api_tokens.all(),
        "new_token": new_token,
    }
    response = render(request, "accounts/agent_detail.html", context, status=status)
    response["Cache-Control"] = "no-store"
    return response


@never_cache
@login_required
@require_http_methods(["GET", "POST"])
def agent_detail(request: HttpRequest, pk: int) -> HttpResponse:
    if request.method == "GET":
        return _agent_page(request, pk)
    service = access.access_service_identity(request.user, pk)
    if not access.can_manage_service_identity(request.user, service):
        return HttpResponse("Only the team's leads and IT change this agent.", status=403)
    form = AgentForm(request.POST, instance=service, user=request.user)
    if not form.is_valid():
        return _agent_page(request, pk, form=form, status=422)
    form.save()
    messages.success(request, f"Saved {service.name}.")
    return redirect("accounts:agent", pk=pk)


@login_required
@require_POST
def agent_token_create(request: HttpRequest, pk: int) -> HttpResponse:
    service = access.access_service_identity(request.user, pk)
    if not access.can_manage_service_identity(request.user, service):
        return HttpResponse("Only the team's leads and IT issue this agent's tokens.", status=403)
    if not service.is_active():
        return HttpResponse("The agent is disabled or expired.", status=409)
    form = TokenForm(request.POST, user=service.user)
    if not form.is_valid():
        return _agent_page(request, pk, status=422, token_form=form)
    expires_at = form.expires_at(cap=service.expires_at)
    _, plaintext = tokens.issue(
        service.user, form.cleaned_data["name"], expires_at, by=request.user, scope_fields=form.scope_fields
    )
    return _agent_page(request, pk, new_token=plaintext)


@login_required
@require_POST
def agent_token_revoke(request: HttpRequest, pk: int, token_pk: int) -> HttpResponse:
    service = access.access_service_identity(request.user, pk)
    if not access.can_manage_service_identity(request.user, service):
        return HttpResponse("Only the team's leads and IT revoke this agent's tokens.", status=403)
    token = get_object_or_404(service.user.api_tokens, pk=token_pk)
    if tokens.revoke(token, by=request.user):
        messages.success(request, f"Revoked the token {token.hint}….")
    return redirect("accounts:agent", pk=pk)


@login_required
@require_POST
def agent_disable(request: HttpRequest, pk: int) -> HttpResponse:
    service = access.access_service_identity(request.user, pk)
    if not access.can_manage_service_identity(request.user, service):
        return HttpResponse("Only the team's leads and IT disable this agent.", status=403)
    agents.disable(service, by=request.user)
    messages.success(request, f"Disabled {service.name}; its tokens no longer work.")
    return redirect("accounts:agent", pk=pk)
