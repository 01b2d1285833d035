"""The notifications section of the account page, and where its form posts."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.utils import timezone
from django.views.decorators.http import require_POST

from portal.notify import outbox
from portal.notify.forms import PreferenceForm
from portal.notify.models import Event, Notification, Preference

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


@login_required
@require_POST
def send_test(request: HttpRequest) -> HttpResponse:
    """A test message on each channel the person has turned on, sent by the worker as any other."""
    user: Any = request.user
    pref = Preference.objects.filter(user=user).first()
    if pref is None or not pref.channels():
        messages.error(request, "Turn on e-mail or give a webhook first, then send a test.")
        return redirect("/accounts/#notifications")
    now = timezone.now()
    text = "A test from Gridlane: this is how your notifications reach you."
    sent = outbox.tell_people([user.pk], Event.TEST, f"test:{now.isoformat()}", "A test message", text)
    messages.success(
        request, f"A test is on its way ({sent} channel{'s' if sent != 1 else ''}); see below how it went."
    )
    return redirect("/accounts/#notifications")
