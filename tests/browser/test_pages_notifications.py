"""Notifications on the account page in Chromium: turned on by keyboard, a bad webhook refused with the reason
beside the field, and the recent messages shown with how they went."""

from __future__ import annotations

import socket

import pytest

from portal.notify.models import Notification, Preference
from tests.browser.conftest import screenshot
from tests.browser.test_pages_dashboard import signed_in


@pytest.fixture
def hooks_host(monkeypatch, settings):
    """hooks.example, the site's chat service, on an inner network IT lists for webhooks (nothing resolves names
    here, and nothing is sent: no worker runs)."""
    settings.GRIDLANE_NOTIFY_WEBHOOK_HOSTS = ["hooks.example", "10.99.0.0/16"]
    real = socket.getaddrinfo

    def getaddrinfo(host, port, *args, **kwargs):
        if host == "hooks.example":
            return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("10.99.0.7", port))]
        return real(host, port, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)


def test_a_person_turns_on_notifications_and_sees_how_they_went(browser_page, gridlane, cast, submit, hooks_host):
    page = browser_page
    alice = cast["alice"]
    signed_in(page, gridlane, alice)
    page.goto(f"{gridlane}/accounts/")
    section = page.get_by_role("region", name="Notifications")
    section.get_by_label("E-mail me").check()
    section.get_by_label("E-mail address").fill("alice@lab.example")
    section.get_by_label("Webhook URL").fill("https://user:secret@hooks.example/T0")
    section.get_by_role("button", name="Save").click()
    page.get_by_text("Put no user name or password in the URL.").wait_for()
    assert not Preference.objects.exists()

    section = page.get_by_role("region", name="Notifications")
    section.get_by_label("Webhook URL").fill("https://hooks.example/T0/B0/x")
    section.get_by_label("idle warning").uncheck()
    section.get_by_label("Webhook URL").press("Enter")
    page.get_by_text("Saved what you hear about.").wait_for()
    pref = Preference.objects.get(user=alice)
    assert (pref.email, pref.webhook_url) == (True, "https://hooks.example/T0/B0/x")
    assert "idle" not in pref.events

    w = submit(alice, name="resnet")
    Notification.objects.create(user=alice, workload=w, event="started", channel="webhook", key="k1",
                                subject="resnet started", text="Training run resnet started.", state="failed",
                                attempts=5, error="the webhook answered 404 Not Found")  # fmt: skip
    page.reload()
    row = page.get_by_role("row", name="resnet started")
    assert "gave up after 5 tries: the webhook answered 404 Not Found" in row.inner_text()
    screenshot(page, "account-notifications")
