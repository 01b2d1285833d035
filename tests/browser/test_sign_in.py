"""Signing in through the real provider (tests/idp) in headless Chromium: the teams come from the groups
claim, a changed claim changes access at the next sign-in, signing out ends the provider's session, and
a replayed callback is refused."""

from __future__ import annotations

import uuid

from portal.accounts.models import AuditEvent, Membership
from tests.browser.conftest import directory, screenshot


def sign_in(page, gridlane, login):
    page.goto(f"{gridlane}/accounts/")
    page.wait_for_url(f"{gridlane}/accounts/login/**")
    page.click("#sso")
    page.wait_for_url("**/interaction/**")
    page.fill("input[name=login]", login)
    page.fill("input[name=password]", "any password")
    page.click("button[type=submit]")
    page.wait_for_url(f"{gridlane}/accounts/")


def teams(page):
    return sorted(page.locator("#teams li[data-team]").evaluate_all("items => items.map(i => i.dataset.team)"))


def test_teams_come_from_the_providers_claims_and_follow_them_at_the_next_sign_in(browser_page, gridlane, cast, submit):
    page = browser_page
    login = f"erin-{uuid.uuid4().hex[:8]}"
    visions = submit(cast["alice"], name="visions")
    frauds = submit(cast["charlie"], name="frauds")
    callbacks = []
    page.on("request", lambda r: callbacks.append(r.url) if "/oidc/callback/" in r.url else None)

    directory(login, ["vision", "somewhere-else"])
    sign_in(page, gridlane, login)
    assert teams(page) == ["vision"]
    assert page.locator("header .who a").inner_text() == login
    screenshot(page, "signed-in-vision")
    assert page.goto(f"{gridlane}{visions.get_absolute_url()}").status == 200
    assert page.goto(f"{gridlane}{frauds.get_absolute_url()}").status == 404

    # Signing out ends the provider's session too: it asks, then sends the browser back to Gridlane.
    page.goto(f"{gridlane}/accounts/")
    page.click("header button:has-text('Sign out')")
    page.click("button[name=logout]")
    page.wait_for_url(f"{gridlane}/accounts/signed-out/")
    assert "Signed out" in page.inner_text("h1")

    # The provider now says erin moved to fraud; the next sign-in (with a password again) follows it.
    directory(login, ["fraud"])
    sign_in(page, gridlane, login)
    assert teams(page) == ["fraud"]
    screenshot(page, "signed-in-fraud")
    assert page.goto(f"{gridlane}{visions.get_absolute_url()}").status == 404
    assert page.goto(f"{gridlane}{frauds.get_absolute_url()}").status == 200
    assert [m.group.slug for m in Membership.objects.filter(user__username=login)] == ["fraud"]

    # The first sign-in's callback, replayed, is refused.
    replay = page.goto(callbacks[0])
    assert replay.status == 403
    assert "Sign-in refused" in page.inner_text("h1")
    screenshot(page, "replayed-callback-refused")

    actions = list(AuditEvent.objects.filter(target__contains=login).values_list("action", flat=True))
    assert {"signin", "signout", "membership.created", "membership.deleted"} <= set(actions)
    assert AuditEvent.objects.filter(action="signin.failed", detail__reason__icontains="replayed").exists()
    assert page.gridlane_external == []  # Gridlane's own pages load nothing from outside


def test_it_staff_from_claims_reach_the_audit_log(browser_page, gridlane, cast):
    page = browser_page
    login = f"ivy-{uuid.uuid4().hex[:8]}"
    directory(login, ["it-admins"])
    sign_in(page, gridlane, login)
    assert "IT staff" in page.inner_text("#it-staff")
    page.goto(f"{gridlane}/admin/accounts/auditevent/?kind=signin")
    assert page.locator("#result_list").count() == 1
    assert login in page.inner_text("#result_list")
    screenshot(page, "it-audit-log")
