"""The notifications section of the account page, and where its form posts."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.utils import timezone
from django.views.decorators.http import require_POST

from portal.notify.forms import PreferenceForm
from portal.notify.models import Notification, Preference

RECENT = 10


def section(user: Any, form: PreferenceForm | None = None) -> dict[str, Any]:
    """The account page's context for its notifications section (two queries)."""
    if form is None:
        pref = Preference.objects.filter(user=user).first() or Preference(user=user)
        form = PreferenceForm(instance=pref)
    recent = Notification.objects.filter(user=user).select_related("workload")[:RECENT]
    return {"notify_form": form, "notify_recent": recent}


@login_required
@require_POST
def preferences(request: HttpRequest) -> HttpResponse:
    from portal.accounts.views import account_page

    user: Any = request.user
    pref = Preference.objects.filter(user=user).first() or Preference(user=user)
    form = PreferenceForm(request.POST, instance=pref)
    if not form.is_valid():
        return account_page(request, section_forms={"notify": form}, status=422)
    pref = form.save(commit=False)
    pref.updated_at = timezone.now()
    pref.save()
    messages.success(request, "Saved what you hear about." if pref.channels() else "Notifications are off.")
    return redirect("/accounts/#notifications")
