"""JupyterLab through the portal without a browser: its page carries no token, a kernel runs code over a
WebSocket, and a WebSocket from another site or another person is refused before it opens."""

from __future__ import annotations

import json
import uuid

import pytest
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect

from tests.connect.client import call
from tests.connect.serving import session_cookie


@pytest.fixture
def notebook(alice, running, jupyter):
    w = running(alice)
    return w, jupyter(w)


def ws_url(base: str, path: str) -> str:
    return "ws" + base.removeprefix("http") + path


def execute(code: str, session: str) -> str:
    return json.dumps({
        "header": {"msg_id": uuid.uuid4().hex, "username": "alice", "session": session, "msg_type": "execute_request",
                   "version": "5.3", "date": "2026-12-01T00:00:00Z"},
        "parent_header": {}, "metadata": {}, "channel": "shell", "buffers": [],
        "content": {"code": code, "silent": False, "store_history": False, "user_expressions": {},
                    "allow_stdin": False, "stop_on_error": True},
    })  # fmt: skip


def test_jupyterlabs_page_comes_through_without_its_token(asgi_portal, notebook, alice):
    w, server = notebook
    page = call(asgi_portal, "GET", f"/connect/{w.pk}/lab", Cookie=session_cookie(alice), Accept="text/html")
    assert page.status == 200
    assert "JupyterLab" in page.text
    assert f"/connect/{w.pk}/" in page.text  # its base URL, so its own links stay under the connect path
    assert server.token not in page.text
    assert '"token": ""' in page.text


def test_a_kernel_runs_code_over_a_websocket_through_the_portal(asgi_portal, notebook, alice):
    w, _ = notebook
    cookie = session_cookie(alice)
    started = call(asgi_portal, "POST", f"/connect/{w.pk}/api/kernels", b"{}", Cookie=cookie, Origin=asgi_portal,
                   Content_Type="application/json")  # fmt: skip
    assert started.status == 201, started.text
    kernel = started.json()["id"]
    session = uuid.uuid4().hex
    url = ws_url(asgi_portal, f"/connect/{w.pk}/api/kernels/{kernel}/channels?session_id={session}")
    with connect(url, additional_headers={"Cookie": cookie, "Origin": asgi_portal}, open_timeout=30) as ws:
        ws.send(execute("print(6 * 7)", session))
        while True:
            message = json.loads(ws.recv(timeout=60))
            if message["msg_type"] == "stream":
                assert message["content"]["text"] == "42\n"
                break


def test_a_websocket_from_another_site_or_another_person_is_refused(asgi_portal, notebook, alice, charlie):
    w, _ = notebook
    url = ws_url(asgi_portal, f"/connect/{w.pk}/api/kernels/x/channels")
    with pytest.raises(InvalidStatus) as cross_site:
        connect(url, additional_headers={"Cookie": session_cookie(alice), "Origin": "https://evil.example"})
    assert cross_site.value.response.status_code == 403
    with pytest.raises(InvalidStatus) as theirs:
        connect(url, additional_headers={"Cookie": session_cookie(charlie), "Origin": asgi_portal})
    assert theirs.value.response.status_code == 403
    with pytest.raises(InvalidStatus) as signed_out:
        connect(url, additional_headers={"Origin": asgi_portal})
    assert signed_out.value.response.status_code == 403
