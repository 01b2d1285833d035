"""Notifications end to end: a person opts in on the account page; the worker's outbox turns their work's
events into e-mails (Django's mail, the test's outbox) and webhook posts (a real HTTP server on loopback);
a hanging webhook never holds up a cycle; failures are retried, then given up, and shown."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from datetime import timedelta
from decimal import Decimal
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from django.core import mail
from django.utils import timezone

from portal.notify import outbox, send
from portal.notify.models import Event, Notification, Preference
from portal.worker import tasks
from portal.workloads import services
from portal.workloads.models import Workload
from portal.workloads.states import State
from tests.conftest import wait_until

pytestmark = pytest.mark.django_db(transaction=True)


class Hook:
    """A webhook on 127.0.0.1 that records what it is sent; `status` is what it answers, `gate` holds answers."""

    def __init__(self) -> None:
        self.posts: list[dict[str, Any]] = []
        self.status = 200
        self.gate = threading.Event()
        self.gate.set()
        hook = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                hook.gate.wait(timeout=60)
                hook.posts.append(json.loads(body))
                self.send_response(hook.status)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def texts(self) -> list[str]:
        return [p["gridlane"]["text"] for p in self.posts]


@pytest.fixture
def hook(settings: Any) -> Iterator[Hook]:
    settings.GRIDLANE_NOTIFY_WEBHOOK_HOSTS = ["127.0.0.1/32"]  # IT lets webhooks reach this loopback test server
    h = Hook()
    yield h
    h.gate.set()
    h.server.shutdown()
    h.server.server_close()


def opt_in(user: Any, **fields: Any) -> Preference:
    return Preference.objects.create(user=user, **({"email": True} | fields))


def run(w: Workload, *states: State, **fields: Any) -> Workload:
    """Walk the workload through states, as the worker would."""
    for state in states:
        w.refresh_from_db()
        assert services.transition(w, state, reason=f"to {state}", **(fields if state == states[-1] else {}))
    return w


def notify_step() -> None:
    outbox.collect(timezone.now())
    send.deliver(timezone.now())


def all_sent() -> bool:
    notify_step()
    return not Notification.objects.exclude(state=Notification.State.SENT).exists()


def test_the_owner_hears_by_email_that_work_started_and_finished(alice, submit):
    alice.email = "alice@example.org"
    alice.save()
    opt_in(alice)
    w = submit(alice, name="resnet")
    run(w, State.ADMITTED, State.DISPATCHING, State.RUNNING)
    wait_until(all_sent)
    run(w, State.SUCCEEDED)
    wait_until(all_sent)
    assert [m.subject for m in mail.outbox] == ["[Gridlane] resnet started", "[Gridlane] resnet finished"]
    assert mail.outbox[0].to == ["alice@example.org"]
    assert f"/workloads/{w.pk}/" in mail.outbox[1].body


def test_a_webhook_gets_slack_style_json_for_a_failure_with_its_reason(alice, submit, hook):
    opt_in(alice, email=False, webhook_url=hook.url)
    w = submit(alice, name="flaky")
    run(w, State.ADMITTED, State.DISPATCHING, State.RUNNING)
    w.refresh_from_db()
    services.transition(w, State.FAILED, reason="exit code 3", exit_code=3)
    wait_until(all_sent)
    assert sorted(hook.texts()) == ["Training run flaky failed with exit code 3: exit code 3",
                                    "Training run flaky started."]  # fmt: skip
    failure = next(p for p in hook.posts if p["gridlane"]["event"] == "failed")
    assert failure["text"].startswith("Training run flaky failed")  # what Slack and Teams show
    assert failure["gridlane"]["workload"] == str(w.pk)


def test_only_the_events_asked_for_and_only_to_those_who_asked(alice, bob, submit, hook):
    opt_in(alice, email=False, webhook_url=hook.url, events=["finished"])
    mine, bobs = submit(alice, name="mine"), submit(bob, name="bobs")
    for w in (mine, bobs):
        run(w, State.ADMITTED, State.DISPATCHING, State.RUNNING, State.SUCCEEDED)
    wait_until(all_sent)
    assert len(hook.posts) == 1
    assert hook.texts()[0].startswith("Training run mine finished after ")
    assert not mail.outbox


def test_nothing_is_told_twice_when_steps_run_again_or_overlap(alice, submit, hook):
    opt_in(alice, email=False, webhook_url=hook.url)
    w = submit(alice, name="once")
    run(w, State.ADMITTED, State.DISPATCHING, State.RUNNING)
    for _ in range(3):
        outbox.collect(timezone.now())
    assert Notification.objects.count() == 1
    wait_until(all_sent)
    outbox.collect(timezone.now() + timedelta(seconds=30))  # the overlap reads the same event again
    assert Notification.objects.count() == 1
    assert len(hook.posts) == 1


def test_an_array_tells_of_itself_not_of_each_element(alice, submit, hook):
    opt_in(alice, email=False, webhook_url=hook.url)
    parent = submit(alice, name="sweep", array="0-2")
    for element in Workload.objects.filter(array_parent=parent):
        run(element, State.ADMITTED, State.DISPATCHING, State.RUNNING, State.SUCCEEDED)
    wait_until(all_sent)
    assert hook.texts() == ["Training run sweep finished."]


def test_a_hanging_webhook_never_holds_up_the_worker(alice, submit, hook):
    opt_in(alice, email=False, webhook_url=hook.url)
    hook.gate.clear()  # the webhook takes the request and does not answer
    w = submit(alice, name="slow")
    run(w, State.ADMITTED, State.DISPATCHING, State.RUNNING)
    tasks.cycle()
    tasks.cycle()  # a cycle returns though a send is outstanding
    n = Notification.objects.get()
    assert n.state == Notification.State.SENDING
    wait_until(lambda: Workload.objects.filter(pk=w.pk, state=State.RUNNING).exists())
    hook.gate.set()
    wait_until(lambda: Notification.objects.filter(state=Notification.State.SENT).exists())


def test_a_failing_webhook_is_tried_again_then_given_up_with_the_reason_shown(alice, submit, hook, settings, client):
    settings.GRIDLANE_NOTIFY_RETRY_S = 0
    opt_in(alice, email=False, webhook_url=hook.url)
    hook.status = 500
    w = submit(alice, name="nowhere")
    run(w, State.ADMITTED, State.DISPATCHING, State.RUNNING)

    def given_up() -> bool:
        notify_step()
        return Notification.objects.filter(state=Notification.State.FAILED).exists()

    wait_until(given_up)
    n = Notification.objects.get()
    assert (n.attempts, n.error) == (send.MAX_ATTEMPTS, "the webhook answered 500 Internal Server Error")
    assert len(hook.posts) == send.MAX_ATTEMPTS
    client.force_login(alice)
    page = client.get("/accounts/").content.decode()
    assert "gave up after 5 tries: the webhook answered 500 Internal Server Error" in page


def test_a_sender_that_died_leaves_the_message_due_again_after_its_lease(alice, submit, hook):
    opt_in(alice, email=False, webhook_url=hook.url)
    w = submit(alice, name="orphan")
    run(w, State.ADMITTED, State.DISPATCHING, State.RUNNING)
    outbox.collect(timezone.now())
    Notification.objects.update(state=Notification.State.SENDING, due_at=timezone.now() + send.LEASE, attempts=1)
    assert send.deliver(timezone.now()) == 0  # still leased to the (dead) sender
    assert send.deliver(timezone.now() + send.LEASE + timedelta(seconds=1)) == 1
    wait_until(lambda: Notification.objects.filter(state=Notification.State.SENT).exists())
    assert len(hook.posts) == 1


def test_idle_warnings_and_lease_endings_are_told_once_each(alice, submit, hook):
    opt_in(alice, email=False, webhook_url=hook.url)
    w = submit(alice, queue="notebooks", kind="notebook", name="explore", command="", lease_hours=Decimal(1))
    stop_at = timezone.now().replace(microsecond=0) + timedelta(minutes=10)
    for _ in range(2):
        outbox.tell(w, Event.IDLE, key=f"idle:{stop_at.isoformat()}", when=stop_at)
        outbox.tell(w, Event.LEASE, key=f"lease:{stop_at.isoformat()}", when=stop_at)
    wait_until(all_sent)
    at = f"{stop_at:%Y-%m-%d %H:%M} UTC"
    assert sorted(hook.texts()) == sorted([
        f"Notebook explore has been idle and stops at {at} unless you use it.",
        f"The lease of notebook explore ends at {at}; extend it from its page.",
    ])  # fmt: skip


# --- The account page ---------------------------------------------------------------------------------------


def test_a_person_turns_notifications_on_from_the_account_page(client, alice, hook):
    client.force_login(alice)
    page = client.get("/accounts/").content.decode()
    assert "<title>Your account" in page
    assert page.count('id="notifications"') == 1  # one section, in the page's body
    assert "Off until you turn it on" in page
    form = {"email": "on", "email_to": "alice@lab.example", "webhook_url": hook.url, "events": ["started", "failed"]}
    response = client.post("/accounts/notifications/", form)
    assert response.status_code == 302
    pref = Preference.objects.get(user=alice)
    assert (pref.email, pref.email_to, pref.webhook_url, pref.events) == (True, "alice@lab.example", hook.url,
                                                                          ["started", "failed"])  # fmt: skip


@pytest.mark.parametrize(
    ("fields", "says"),
    [
        ({"webhook_url": "ftp://example.org/hook"}, "Give an http or https URL."),
        ({"webhook_url": "not a url"}, "Enter a valid URL."),
        ({"webhook_url": "https://user:secret@example.org/hook"}, "Put no user name or password in the URL."),
        ({"webhook_url": "https://evil.example/hook"}, "Webhooks may go to hooks.slack.com only"),
        ({"email": "on", "email_to": ""}, "Your sign-in gives no e-mail address: give one here."),
        ({"email": "on", "email_to": "not-an-address"}, "Enter a valid email address."),
        ({"events": ["started", "reboot"]}, "Select a valid choice"),
    ],
)
def test_bad_settings_are_a_clear_error_and_nothing_is_saved(client, alice, settings, fields, says):
    settings.GRIDLANE_NOTIFY_WEBHOOK_HOSTS = ["hooks.slack.com"]
    alice.email = ""
    alice.save()
    client.force_login(alice)
    response = client.post("/accounts/notifications/", fields)
    assert response.status_code == 422
    assert says in response.content.decode()
    assert not Preference.objects.exists()


def test_the_webhook_check_allows_subdomains_of_what_it_names(settings):
    settings.GRIDLANE_NOTIFY_WEBHOOK_HOSTS = ["slack.com"]
    assert send.webhook_problem("https://hooks.slack.com/services/T0/B0/x") == ""
    assert send.webhook_problem("https://slack.com.evil.example/x") != ""
    assert send.webhook_problem("https://notslack.com/x") != ""


def test_the_account_page_costs_the_same_queries_for_one_notification_or_many(
    client, alice, submit, django_assert_max_num_queries
):
    opt_in(alice, email=False, webhook_url="https://hooks.example/x")
    client.force_login(alice)
    w = submit(alice, name="counted")
    Notification.objects.create(user=alice, workload=w, event="started", channel="webhook", key="k0", subject="s",
                                text="t")  # fmt: skip
    with django_assert_max_num_queries(12) as one:
        assert client.get("/accounts/").status_code == 200
    for i in range(1, 10):
        Notification.objects.create(user=alice, workload=w, event="started", channel="webhook", key=f"k{i}",
                                    subject="s", text="t")  # fmt: skip
    with django_assert_max_num_queries(len(one.captured_queries)):
        assert client.get("/accounts/").status_code == 200
