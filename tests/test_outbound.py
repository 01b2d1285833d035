"""The outbound guard (portal.outbound) against a real listener on loopback: every spelling of a loopback,
link-local, private or reserved address is refused unless IT lists its network, and what passes is connected to
at the address checked, with no redirect followed."""

from __future__ import annotations

import ipaddress
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from portal import outbound
from portal.notify import send
from portal.notify.models import Preference


class Listener:
    """An HTTP server on `host` that counts the requests it gets; answers `status` with `location`."""

    def __init__(self, host: str = "127.0.0.1", status: int = 204, location: str = "") -> None:
        self.hits: list[str] = []
        listener = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length", "0")))
                listener.hits.append(self.headers.get("Host", ""))
                self.send_response(status)
                if location:
                    self.send_header("Location", location)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer((host, 0), Handler)
        self.port = self.server.server_port
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def listener() -> Iterator[Listener]:
    found = Listener()
    yield found
    found.close()


# Every spelling of 127.0.0.1 the C resolver (and so any HTTP client) takes.
LOOPBACK_SPELLINGS = [
    "127.0.0.1", "127.0.0.1.", "2130706433", "0x7f000001", "017700000001", "0177.0.0.1", "0x7f.0.0.1",
    "0x7f.1", "127.1", "127.0.1", "[::ffff:127.0.0.1]", "[::ffff:7f00:1]", "[0:0:0:0:0:ffff:127.0.0.1]",
    "[::127.0.0.1]", "localhost", "LOCALHOST.", "[64:ff9b::7f00:1]", "[2002:7f00:1::]",
]  # fmt: skip
# Addresses that are never a webhook's by default: link-local (cloud metadata), private, reserved, and their
# IPv6 carriers.
OTHER_SPELLINGS = [
    "169.254.169.254", "0xa9fea9fe", "2852039166", "0251.0376.0251.0376", "169.254.43518", "[fe80::1]",
    "[::ffff:169.254.169.254]", "[64:ff9b::a9fe:a9fe]", "[fd00:ec2::254]", "10.0.0.1", "10.1", "172.16.0.1",
    "192.168.0.1", "100.64.0.1", "[fc00::1]", "192.0.2.1", "[2001:db8::1]", "240.0.0.1", "[::1]",
]  # fmt: skip
NEVER = ["0.0.0.0", "0", "[::]", "224.0.0.1", "[ff02::1]", "255.255.255.255"]  # noqa: S104 (refused)


@pytest.mark.parametrize("host", LOOPBACK_SPELLINGS + OTHER_SPELLINGS + NEVER)
def test_a_webhook_to_any_spelling_of_an_inner_address_is_refused_and_nothing_is_sent(settings, listener, host):
    settings.GRIDLANE_NOTIFY_WEBHOOK_HOSTS = []
    url = f"http://{host}:{listener.port}/hook"
    with pytest.raises(ValueError, match=r"address|never|resolves"):
        send.webhook_target(url)
    assert listener.hits == []


@pytest.mark.parametrize("host", LOOPBACK_SPELLINGS)
def test_it_lists_the_loopback_network_and_every_spelling_reaches_the_listener_at_the_address_checked(
    settings, listener, host
):
    settings.GRIDLANE_NOTIFY_WEBHOOK_HOSTS = ["127.0.0.0/8"]
    url = f"http://{host}:{listener.port}/hook"
    to = send.webhook_target(url)
    assert to.address == ipaddress.ip_address("127.0.0.1") or outbound.carried(to.address) == ipaddress.ip_address(
        "127.0.0.1"
    )
    if to.address.version == 6:  # the listener is IPv4: connect to what the IPv6 address carries, as checked
        to = outbound.Checked(to.host, ipaddress.ip_address("127.0.0.1"), to.port)
    assert outbound.post(url, b"{}", {"Content-Type": "application/json"}, 5, to)[0] == 204
    assert len(listener.hits) == 1


@pytest.mark.parametrize("host", NEVER)
def test_unspecified_and_multicast_are_refused_even_where_it_lists_everything(settings, host):
    settings.GRIDLANE_NOTIFY_WEBHOOK_HOSTS = ["0.0.0.0/0", "::/0"]
    with pytest.raises(ValueError, match="never a place to connect to"):
        send.webhook_target(f"http://{host}/hook")


def test_a_name_that_resolves_to_the_metadata_service_is_refused_before_any_connection():
    stand_in = Listener("127.0.0.2")  # what a cloud's 169.254.169.254 would be: here, a second loopback address
    try:
        metadata = ipaddress.ip_address("169.254.169.254")
        with pytest.raises(outbound.Refused, match=r"resolves to 169\.254\.169\.254: .*link-local"):
            outbound.check("metadata.evil.example", stand_in.port, [], True, lambda host, port: [metadata])
        mixed = [ipaddress.ip_address("93.184.216.34"), metadata]  # one good address is not enough: all must pass
        with pytest.raises(outbound.Refused):
            outbound.check("half.evil.example", stand_in.port, [], True, lambda host, port: mixed)
        assert stand_in.hits == []
    finally:
        stand_in.close()


def test_the_connection_goes_to_the_address_checked_not_to_the_name_again(listener):
    """DNS rebinding: the name is never resolved a second time (this one resolves nowhere at all)."""
    to = outbound.Checked("rebinding.invalid", ipaddress.ip_address("127.0.0.1"), listener.port)
    status, _ = outbound.post(f"http://rebinding.invalid:{listener.port}/x", b"{}", {}, 5, to)
    assert status == 204
    assert listener.hits == [f"rebinding.invalid:{listener.port}"]  # the Host is still the name given


def test_a_redirect_is_never_followed(settings):
    inner = Listener()
    outer = Listener(status=302, location=f"http://127.0.0.1:{inner.port}/elsewhere")
    try:
        settings.GRIDLANE_NOTIFY_WEBHOOK_HOSTS = ["127.0.0.1/32"]
        url = f"http://127.0.0.1:{outer.port}/hook"
        assert outbound.post(url, b"{}", {}, 5, send.webhook_target(url))[0] == 302
        assert (len(outer.hits), inner.hits) == (1, [])
    finally:
        inner.close()
        outer.close()


def test_names_it_lists_still_limit_webhooks_and_a_literal_needs_a_listed_network(settings):
    settings.GRIDLANE_NOTIFY_WEBHOOK_HOSTS = ["hooks.slack.com", "10.20.0.0/16"]
    assert send.webhook_problem("https://hooks.slack.com/services/x") == ""
    assert "hooks.slack.com only" in send.webhook_problem("https://93.184.216.34/x")
    assert send.webhook_problem("https://10.20.1.2/x") == ""
    assert "private" in send.webhook_problem("https://10.21.1.2/x") or "only" in send.webhook_problem(
        "https://10.21.1.2/x"
    )


def test_a_public_address_passes_where_the_public_internet_is_allowed_and_not_elsewhere():
    assert outbound.check("93.184.216.34", 443, [], True).address == ipaddress.ip_address("93.184.216.34")
    with pytest.raises(outbound.Refused, match=r"on no network IT allows"):
        outbound.check("93.184.216.34", 443, [], False)


@pytest.mark.parametrize("host", ["256.0.0.1", "1.2.3.256", "0x100000000", "127.0.0.0x100"])
def test_an_address_with_a_part_too_large_is_refused(host):
    with pytest.raises(outbound.Refused):
        outbound.check(host, 80, [ipaddress.ip_network("0.0.0.0/0")], True, lambda h, p: [])


@pytest.mark.django_db
@pytest.mark.parametrize(
    "url",
    ["http://169.254.169.254/latest/meta-data/", "http://[::ffff:127.0.0.1]/hook", "http://2130706433/hook",
     "http://127.1:8000/hook", "http://0x7f.1/hook", "http://10.0.0.5/hook", "http://[fd00::1]/hook",
     "http://localhost./hook", "http://0.0.0.0/hook"],
)  # fmt: skip
def test_the_account_page_refuses_an_inner_webhook_on_its_field_and_saves_nothing(client, alice, settings, url):
    settings.GRIDLANE_NOTIFY_WEBHOOK_HOSTS = []
    client.force_login(alice)
    response = client.post("/accounts/notifications/", {"webhook_url": url, "events": ["started"]})
    assert response.status_code == 422
    assert "webhook_url" in response.context["notify_form"].errors
    assert not Preference.objects.exists()
