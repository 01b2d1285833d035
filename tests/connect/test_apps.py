"""A web app a training run publishes (with the callback notebooks use) opens through the same path: what goes
to the app and what comes back, streamed both ways, and the app's own secret never reaches the browser."""

from __future__ import annotations

import http.client
import json
import secrets
from pathlib import Path

import pytest

from portal.workloads import notebook_endpoint
from portal.workloads.models import Workload
from tests.connect.app import running_app
from tests.connect.client import call
from tests.connect.serving import session_cookie

MB = 1024 * 1024


def rss_peak_kib(pid: int) -> int:
    """The process's peak resident memory so far (VmHWM), in KiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise AssertionError("no VmHWM")


@pytest.fixture
def app():
    with running_app(secrets.token_urlsafe(24)) as served:
        yield served


@pytest.fixture
def published(asgi_portal, alice, running, app):
    """alice's training run, which published the app (as TensorBoard) through the callback."""
    w = running(alice, kind="training")
    body = json.dumps({"host": "127.0.0.1", "port": app.port, "token": app.token, "label": "TensorBoard"}).encode()
    secret = notebook_endpoint.secret(w.run_id)
    answer = call(asgi_portal, "POST", f"/api/v1/workloads/{w.pk}/endpoint/", body,
                  Authorization=f"Bearer {secret}", Content_Type="application/json")  # fmt: skip
    assert answer.status == 204, answer.text
    w.refresh_from_db()
    return w


def test_the_training_run_gets_an_open_tensorboard_link_to_the_portal_not_to_the_app(published, app, alice, client):
    assert published.connect_url.endswith(f"/connect/{published.pk}/")
    assert str(app.port) not in published.connect_url
    client.force_login(alice)
    page = client.get(f"/workloads/{published.pk}/").content.decode()
    assert "Open TensorBoard" in page
    assert app.token not in page


def test_the_app_gets_the_request_minus_the_portals_credentials_plus_its_own_token(asgi_portal, published, app, alice):
    cookie = session_cookie(alice) + "; csrftoken=abc; theme=dark"
    answer = call(asgi_portal, "GET", f"/connect/{published.pk}/echo?q=1", Cookie=cookie, Referer="http://x/")
    assert answer.status == 200
    seen = answer.json()
    assert seen["path"] == "/echo?q=1"  # an app that serves from its root gets paths from its root
    headers = {k.lower(): v for k, v in seen["headers"].items()}
    assert headers["cookie"] == "theme=dark"  # the portal's session and CSRF cookies stay with the portal
    assert headers["host"] == f"127.0.0.1:{app.port}"
    assert "referer" not in headers
    assert headers["authorization"] == "token "  # its token was added, and taken out of the answer on the way back
    assert app.token not in answer.text


def test_cookies_the_app_sets_stay_on_its_path_and_it_cannot_set_the_portals(asgi_portal, published, alice):
    answer = call(asgi_portal, "GET", f"/connect/{published.pk}/cookies", Cookie=session_cookie(alice))
    set_cookies = answer.headers.get_all("Set-Cookie")
    assert set_cookies == [f"appcookie=1; Path=/connect/{published.pk}/"]


def test_a_redirect_to_the_apps_own_address_comes_back_under_the_connect_path(asgi_portal, published, alice):
    answer = call(asgi_portal, "GET", f"/connect/{published.pk}/away", Cookie=session_cookie(alice))
    assert answer.status == 302
    assert answer.headers["Location"] == f"/connect/{published.pk}/landing?x=1"


def test_server_sent_events_arrive_as_they_are_sent(asgi_portal, published, app, alice):
    host, port = asgi_portal.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    conn.request("GET", f"/connect/{published.pk}/events", headers={"Cookie": session_cookie(alice)})
    answer = conn.getresponse()
    assert answer.status == 200
    assert answer.getheader("Content-Type") == "text/event-stream"
    assert answer.readline() == b"data: first\n"  # before the app has sent the second: nothing held back
    app.second_event.set()
    assert answer.read().strip() == b"data: second"
    conn.close()


def test_a_200_mb_download_and_upload_stream_through_with_flat_memory(asgi_portal, asgi_portal_pid, published, app,
                                                                      alice):  # fmt: skip
    cookie = session_cookie(alice)
    call(asgi_portal, "GET", f"/connect/{published.pk}/big?size={MB}", Cookie=cookie)  # warm: pools, imports
    before = rss_peak_kib(asgi_portal_pid)
    host, port = asgi_portal.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=120)
    conn.request("GET", f"/connect/{published.pk}/big?size={200 * MB}", headers={"Cookie": cookie})
    answer = conn.getresponse()
    assert answer.status == 200
    got = 0
    while chunk := answer.read(MB):
        got += len(chunk)
    conn.close()
    assert got == 200 * MB

    def body():
        block = b"\xa5" * MB
        for _ in range(200):
            yield block

    conn = http.client.HTTPConnection(host, int(port), timeout=120)
    conn.request("POST", f"/connect/{published.pk}/upload", body=body(),
                 headers={"Cookie": cookie, "Content-Length": str(200 * MB)})  # fmt: skip
    answer = conn.getresponse()
    assert answer.status == 200
    assert json.loads(answer.read()) == {"received": 200 * MB}
    conn.close()
    grown_mib = (rss_peak_kib(asgi_portal_pid) - before) / 1024
    assert grown_mib < 64, f"the portal's peak memory grew by {grown_mib:.0f} MiB for 400 MB through it"


def test_a_workload_that_is_not_running_or_not_yet_reported_says_so(asgi_portal, published, alice, running):
    cookie = session_cookie(alice)
    starting = running(alice, kind="training")
    answer = call(asgi_portal, "GET", f"/connect/{starting.pk}/", Cookie=cookie, Accept="text/html")
    assert answer.status == 503
    assert answer.headers["Retry-After"] == "5"
    assert "starting" in answer.text
    Workload.objects.filter(pk=published.pk).update(state="succeeded")
    answer = call(asgi_portal, "GET", f"/connect/{published.pk}/", Cookie=cookie, Accept="text/html")
    assert answer.status == 404
    assert "not running" in answer.text
