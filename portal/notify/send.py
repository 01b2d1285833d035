"""Sending the outbox: the worker's `deliver` claims what is due and hands it to a few sender threads, so a
slow mail server or a webhook that hangs never holds up a worker cycle. Each message is tried a few times
with growing pauses, then marked failed with what went wrong; the person sees both on their account page.

A claimed message carries a lease (`due_at` in the future): if the process dies while sending, the message
becomes due again when the lease runs out, and is sent by whichever worker comes next.
"""

from __future__ import annotations

import json
import logging
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import urlsplit

from django.conf import settings
from django.core.mail import EmailMessage
from django.db import connection, transaction
from django.db.models import F
from django.utils import timezone

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


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    """A webhook answers where it is: a redirect elsewhere is not followed (it could point anywhere)."""

    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


def send_webhook(n: Notification) -> None:
    url = preference_of(n).webhook_url
    problem = webhook_problem(url)
    if problem:
        raise ValueError(problem)
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
    request = urllib.request.Request(  # noqa: S310 (the scheme is checked above: http or https only)
        url, data=json.dumps(body).encode(), method="POST",
        headers={"Content-Type": "application/json", "User-Agent": "Gridlane"},
    )  # fmt: skip
    opener = urllib.request.build_opener(_NoRedirects)
    try:
        with opener.open(request, timeout=settings.GRIDLANE_NOTIFY_TIMEOUT_S) as answer:
            status = answer.status
    except urllib.error.HTTPError as error:
        raise ValueError(f"the webhook answered {error.code} {error.reason}") from None
    except (urllib.error.URLError, OSError) as error:
        raise ValueError(f"the webhook did not answer: {getattr(error, 'reason', error)}") from None
    if not 200 <= status < 300:
        raise ValueError(f"the webhook answered {status}")


def webhook_problem(url: str) -> str:
    """Why this URL may not be a webhook ("" when it may): http(s) only, no credentials in it, and on a host IT
    allows where IT has named some (GRIDLANE_NOTIFY_WEBHOOK_HOSTS)."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return "Give an http or https URL."
    if parts.username or parts.password:
        return "Put no user name or password in the URL."
    allowed = settings.GRIDLANE_NOTIFY_WEBHOOK_HOSTS
    host = parts.hostname.lower()
    if allowed and not any(host == a or host.endswith(f".{a}") for a in allowed):
        return f"Webhooks may go to {', '.join(allowed)} only (IT's setting)."
    return ""
