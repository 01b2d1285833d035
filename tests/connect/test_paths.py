"""Bad input on the connect path: paths that try to leave the workload, Host and absolute-URL games, requests
from other sites, a server that refuses or never answers. Each gets a clear answer, and nothing ever reaches
anything but the workload's own server."""

from __future__ import annotations

import socket
import threading
import uuid
from collections.abc import Iterator

import pytest

from fabrics.base import Endpoint
from portal.workloads import notebook_endpoint
from tests.connect.app import running_app
from tests.connect.client import call
from tests.connect.serving import session_cookie


@pytest.fixture
def two(asgi_portal, alice, running):
    """alice's app, and another workload of hers whose server would tell if a request reached it."""
    with running_app("") as mine, running_app("") as other:
        w = running(alice, kind="training")
        elsewhere = running(alice, kind="training")
        assert notebook_endpoint.record(w, Endpoint("127.0.0.1", mine.port))
        assert notebook_endpoint.record(elsewhere, Endpoint("127.0.0.1", other.port))
        yield w, elsewhere


@pytest.mark.parametrize(
    "rest",
    [
        "/../{other}/echo",
        "/%2e%2e/{other}/echo",
        "/%2E%2E/{other}/echo",
        "/.%2e/{other}/echo",
        "/./echo",
        "/echo%2f..%2f..%2f{other}",
        "/echo%2F",
        "/echo%5c..",
        "/echo\\..\\x",
        "/echo%00",
    ],
)
def test_paths_that_try_to_leave_the_workload_are_404(asgi_portal, two, alice, rest):
    w, other = two
    answer = call(asgi_portal, "GET", f"/connect/{w.pk}" + rest.format(other=other.pk), Cookie=session_cookie(alice))
    assert answer.status == 404
    assert b"leads nowhere" in answer.body or b"no such workload" in answer.body.lower()


def test_an_absolute_url_or_another_host_changes_nothing_about_where_it_goes(asgi_portal, two, alice):
    w, other = two
    cookie = session_cookie(alice)
    forged = call(asgi_portal, "GET", f"/connect/{w.pk}/echo", Cookie=cookie, Host=f"127.0.0.1:{22}")
    assert forged.status == 200
    assert forged.json()["path"] == "/echo"  # its own server, whatever the Host says
    absolute = call(asgi_portal, "GET", f"http://evil.example.org/connect/{other.pk}/echo", Cookie=cookie)
    assert absolute.status in (200, 400, 404)
    if absolute.status == 200:  # the server took the path of the absolute form: still only that workload's
        assert absolute.json()["path"] == "/echo"


def test_the_bare_prefix_is_sent_to_the_workloads_root(asgi_portal, two, alice):
    w, _ = two
    answer = call(asgi_portal, "GET", f"/connect/{w.pk}?x=1", Cookie=session_cookie(alice))
    assert answer.status == 308
    assert answer.headers["Location"] == f"/connect/{w.pk}/?x=1"


def test_a_malformed_workload_id_is_404(asgi_portal, alice):
    for path in ("/connect/not-a-uuid/", "/connect/../admin/", f"/connect/{uuid.uuid4()}x/"):
        assert call(asgi_portal, "GET", path, Cookie=session_cookie(alice)).status == 404


def test_a_request_from_another_site_is_refused(asgi_portal, two, alice):
    w, _ = two
    cookie = session_cookie(alice)
    theirs = call(asgi_portal, "POST", f"/connect/{w.pk}/upload", b"x", Cookie=cookie, Origin="https://evil.example")
    assert theirs.status == 403
    ours = call(asgi_portal, "POST", f"/connect/{w.pk}/upload", b"x", Cookie=cookie, Origin=asgi_portal)
    assert ours.status == 200


@pytest.fixture
def silent() -> Iterator[int]:
    """A port that accepts connections and never answers."""
    listener = socket.create_server(("127.0.0.1", 0))
    accepted: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                accepted.append(listener.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield listener.getsockname()[1]
    stop.set()
    thread.join()
    for conn in accepted:
        conn.close()
    listener.close()


def test_a_server_that_refuses_is_502_and_one_that_never_answers_is_504(asgi_portal, alice, running, silent):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]  # bound, not listening: refused
    refusing, hanging = running(alice, kind="training"), running(alice, kind="training")
    notebook_endpoint.record(refusing, Endpoint("127.0.0.1", closed))
    notebook_endpoint.record(hanging, Endpoint("127.0.0.1", silent))
    cookie = session_cookie(alice)
    answer = call(asgi_portal, "GET", f"/connect/{refusing.pk}/", Cookie=cookie, Accept="text/html")
    assert answer.status == 502
    assert "does not answer" in answer.text
    answer = call(asgi_portal, "GET", f"/connect/{hanging.pk}/", Cookie=cookie)  # the portal waits 3 s here
    assert answer.status == 504
    assert answer.json() == {"errors": {"detail": ["The workload's server did not answer in time."]}}
