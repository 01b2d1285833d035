"""Messages about no workload: a team's leads hear of IT's decision on a grant (where they asked to), and anyone
with a channel on can send themselves a test from the account page; both go out as any other message."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.core import mail
from django.utils import timezone

from portal.notify import send
from portal.notify.models import Event, Notification, Preference
from tests.conftest import wait_until
from tests.dashboards.test_grants import grant

pytestmark = pytest.mark.django_db(transaction=True)  # the senders are threads with connections of their own


def delivered() -> list[str]:
    """Send what is due, as the worker's notify step does, until it has gone; the subjects e-mailed."""

    def sent() -> bool:
        send.deliver(timezone.now())
        return not Notification.objects.exclude(state=Notification.State.SENT).exists()

    wait_until(sent, timeout=30, every=0.1)
    return [str(m.subject) for m in mail.outbox]


def test_the_leads_hear_of_its_decision_on_a_grant_and_members_do_not(client, it_admin, alice, bob):
    Preference.objects.create(user=bob, email=True)  # the lead, every event (the default)
    Preference.objects.create(user=alice, email=True)  # a member: no grant is hers to hear of
    waiting = grant(state="requested", start=timedelta(hours=1))
    client.force_login(it_admin)
    client.post(f"/it/grants/{waiting.pk}/decide/", {"decision": "approve", "note": "for the deadline"})
    (told,) = Notification.objects.all()
    assert (told.user, told.event, told.workload, told.channel) == (bob, Event.GRANT, None, "email")
    assert told.subject == "Grant approved: Vision"
    assert told.text.startswith("IT approved the grant for Vision: Vision on local: +2 GPUs from ")
    assert told.text.endswith("IT's note: for the deadline")
    assert told.url.endswith("/teams/vision/")
    assert delivered() == ["[Gridlane] Grant approved: Vision"]


def test_a_lead_who_turned_grant_messages_off_hears_nothing(client, it_admin, bob):
    Preference.objects.create(user=bob, email=True, events=["failed"])
    waiting = grant(state="requested", start=timedelta(hours=1))
    client.force_login(it_admin)
    client.post(f"/it/grants/{waiting.pk}/decide/", {"decision": "decline"})
    assert not Notification.objects.exists()


def test_send_a_test_records_one_message_per_channel_and_says_so(client, alice):
    client.force_login(alice)
    assert 'action="/accounts/notifications/test/"' in client.get("/accounts/").content.decode()
    refused = client.post("/accounts/notifications/test/", follow=True).content.decode()
    assert "Turn on e-mail or give a webhook first" in refused
    assert not Notification.objects.exists()
    Preference.objects.create(user=alice, email=True, events=[])  # a test comes whatever one hears of
    page = client.post("/accounts/notifications/test/", follow=True).content.decode()
    assert "A test is on its way (1 channel)" in page
    (test,) = Notification.objects.all()
    assert (test.event, test.channel, test.subject) == (Event.TEST, "email", "A test message")
    assert delivered() == ["[Gridlane] A test message"]
    from portal.notify.forms import PreferenceForm

    choices = dict(getattr(PreferenceForm.base_fields["events"], "choices", ()))
    assert "test" not in choices  # not one to choose: sent when asked
    assert "grant" in choices
