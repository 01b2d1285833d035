"""Sending the outbox: the worker's `deliver` claims what is due and hands it to a few sender threads, so a
slow mail server or a webhook that hangs never holds up a worker cycle. Each message is tried a few times
with growing pauses, then marked failed with what went wrong; the person sees both on their account page.

A claimed message carries a lease (`due_at` in the future): if the process dies while sending, the message
becomes due again when the lease runs out, and is sent by whichever worker comes next.
"""

from __future__ import annotations

import http.client
import json
import logging
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta
from urllib.parse import urlsplit

from django.conf import settings
from django.core.mail import EmailMessage
from django.db import connection, transaction
from django.db.models import F
from django.utils import timezone

from portal import outbound
from portal.notify.models import Notification, Preference

log = logging.getLogger("gridlane.notify")

BATCH = 100  # messages claimed per cycle
LEASE = timedelta(minutes=2)  # a claimed message is due again after this if its sender never reports
MAX_ATTEMPTS = 5

_senders: ThreadPoolExecutor | None = None


def senders() -> ThreadPoolExecutor:
    global _senders
    if _senders is None:
        _senders = ThreadPoolExecutor(max_workers=settings.GRIDLANE_NOTIFY_SENDERS, thread_name_prefix="notify")
    return _senders


def deliver(now: datetime) -> int:
    """Claim what is due and hand it to the senders; returns at once with how many were handed over."""
    with transaction.atomic():
        due = list(
            Notification.objects.select_for_update(skip_locked=True)
            .filter(state__in=[Notification.State.PENDING, Notification.State.SENDING], due_at__lte=now)
            .order_by("due_at")
            .values_list("pk", flat=True)[:BATCH]
        )
        Notification.objects.filter(pk__in=due).update(
            state=Notification.State.SENDING, due_at=now + LEASE, attempts=F("attempts") + 1
        )
    for pk in due:
        senders().submit(send_one, pk)
    return len(due)


def send_one(pk: int) -> None:
    """Send one claimed message and record how it went (in a sender thread, with its own connection)."""
    try:
        n = Notification.objects.select_related("user__notify_preference").get(pk=pk)
        try:
            if n.channel == Notification.Channel.EMAIL:
                send_email(n)
            else:
                send_webhook(n)
        except Exception as error:  # any failure of the channel is the message's to record
            failed(n, error)
        else:
            Notification.objects.filter(pk=pk).update(state=Notification.State.SENT, sent_at=timezone.now(), error="")
    except Exception:
        log.exception("notification %s: could not record how sending went", pk)
    finally:
        connection.close()


def failed(n: Notification, error: Exception) -> None:
    said = (str(error) or type(error).__name__)[:300]
    if n.attempts >= MAX_ATTEMPTS:
        state, due = Notification.State.FAILED, n.due_at
    else:
        state, due = Notification.State.PENDING, timezone.now() + retry_after(n.attempts)
    Notification.objects.filter(pk=n.pk).update(state=state, due_at=due, error=said)
    log.warning("notification %s (%s) failed on try %d: %s", n.pk, n.channel, n.attempts, said)


def retry_after(attempts: int) -> timedelta:
    """30 s, 1 min, 2 min, 4 min... after the first, second, third try."""
    return timedelta(seconds=settings.GRIDLANE_NOTIFY_RETRY_S * 2 ** max(0, attempts - 1))


def preference_of(n: Notification) -> Preference:
    """The settings of the message's person as they are now (selected with it): where it goes."""
    pref: Preference = n.user.notify_preference  # type: ignore[attr-defined, unused-ignore]
    return pref


def send_email(n: Notification) -> None:
    address = preference_of(n).address()
    if not address:
        raise ValueError("no e-mail address: give one on your account page")
    body = f"{n.text}\n\n{n.url}\n\n-- Gridlane. Change what you hear about on your account page."
    EmailMessage(f"[Gridlane] {n.subject}", body, to=[address]).send()


def send_webhook(n: Notification) -> None:
    url = preference_of(n).webhook_url
    to = webhook_target(url)  # checked now, and connected to as checked (portal.outbound)
    body = {
        "text": f"{n.text} <{n.url}|Open in Gridlane>" if n.url else n.text,  # Slack's link syntax; Teams shows it
        "gridlane": {
            "event": n.event,
            "subject": n.subject,
            "text": n.text,
            "url": n.url,
            "workload": str(n.workload_id) if n.workload_id else None,
        },
    }
    headers = {"Content-Type": "application/json", "User-Agent": "Gridlane"}
    try:
        status, reason = outbound.post(url, json.dumps(body).encode(), headers, settings.GRIDLANE_NOTIFY_TIMEOUT_S, to)
    except (OSError, http.client.HTTPException) as error:
        raise ValueError(f"the webhook did not answer: {error or type(error).__name__}") from None
    if not 200 <= status < 300:  # a redirect too: it is never followed (it could point anywhere)
        raise ValueError(f"the webhook answered {status} {reason}".strip())


def webhook_problem(url: str) -> str:
    """Why this URL may not be a webhook ("" when it may), without asking DNS: http(s) only, no credentials in
    it, on a host IT allows where IT has named some (the names in GRIDLANE_NOTIFY_WEBHOOK_HOSTS), and not an
    address literal that `portal.outbound` refuses."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return "Give an http or https URL."
    if parts.username or parts.password:
        return "Put no user name or password in the URL."
    names = [a for a in settings.GRIDLANE_NOTIFY_WEBHOOK_HOSTS if not outbound.networks([a])]
    host = parts.hostname.lower().rstrip(".")
    try:
        address = outbound.literal(host)
    except outbound.Refused as refused:
        return str(refused)
    if address is not None:  # an address literal: only on a network IT lists where IT has named hosts
        listed = webhook_networks()
        if names and not any(address in net for net in listed):
            return f"Webhooks may go to {', '.join(names)} only (IT's setting)."
        return outbound.allowed(address, listed, public=True)
    if names and not any(host == a or host.endswith(f".{a}") for a in names):
        return f"Webhooks may go to {', '.join(names)} only (IT's setting)."
    return ""


def webhook_networks() -> list[outbound.Network]:
    """The networks IT lets webhooks reach beyond the public internet (addresses in GRIDLANE_NOTIFY_WEBHOOK_HOSTS)."""
    return outbound.networks(settings.GRIDLANE_NOTIFY_WEBHOOK_HOSTS)


def webhook_target(url: str) -> outbound.Checked:
    """Where a webhook is sent: `webhook_problem`, then every address its name resolves to checked
    (portal.outbound); ValueError saying why not."""
    problem = webhook_problem(url)
    if problem:
        raise ValueError(problem)
    try:
        return outbound.check_url(url, webhook_networks(), public=True)
    except outbound.Refused as refused:
        raise ValueError(str(refused)) from None
