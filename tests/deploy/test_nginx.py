"""deploy/nginx/gridlane.conf with Debian's nginx in front of two web processes (gunicorn, as deployed): TLS
ends there, both processes serve, /connect/ passes a WebSocket upgrade, a body over the limit answers 413 in the
API's JSON, and forwarded headers count only when they come from the proxy.

The site is used as shipped, with its marked lines set for this machine: ports on 127.0.0.1, a throwaway
certificate, the two web processes as upstreams, and `proxy_bind 127.0.0.2` so that the web processes can tell
the proxy (127.0.0.2, their GRIDLANE_TRUSTED_PROXIES) from a client that calls them directly (127.0.0.1).

IT's monitoring network is 127.0.0.1 alone here (the site's `geo` line and the web's GRIDLANE_OPS_NETWORKS),
so that a client on another loopback address, 127.0.0.3, stands for one on a network IT does not list: the
only kind of second address this machine has (127.0.0.2 is the proxy's own)."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import signal
import socket
import ssl
import subprocess
import threading
from pathlib import Path

import pytest
from django.db import connection

from tests.deploy.helpers import ROOT, database_url, free_port, gunicorn, production_env, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

NGINX = "/usr/sbin/nginx"
SITE = ROOT / "deploy" / "nginx" / "gridlane.conf"


def render_site(http: int, https: int, webs: list[int], connect: int, tls: Path) -> str:
    site = SITE.read_text()
    replacements = [
        ("listen 80;", f"listen 127.0.0.1:{http};"),
        ("listen 443 ssl http2;", f"listen 127.0.0.1:{https} ssl http2;"),
        ("/etc/gridlane/tls/fullchain.pem", str(tls / "cert.pem")),
        ("/etc/gridlane/tls/privkey.pem", str(tls / "key.pem")),
        ("proxy_http_version 1.1;", "proxy_http_version 1.1;\n    proxy_bind 127.0.0.2;"),
    ]
    for old, new in replacements:
        assert old in site, old
        site = site.replace(old, new)
    site = re.sub(r"\n\s*listen \[::\]:\d+( ssl http2)?;", "", site)  # no IPv6 here
    web_lines = "\n".join(f"    server 127.0.0.1:{port};" for port in webs)
    site = re.sub(r"(upstream gridlane_web \{\n)(?:    server [^\n]+\n)+", rf"\g<1>{web_lines}\n", site)
    connect_line = f"    server 127.0.0.1:{connect};"
    site = re.sub(r"(upstream gridlane_connect \{\n)(?:    server [^\n]+\n)+", rf"\g<1>{connect_line}\n", site)
    return site


class EchoWebSocket(threading.Thread):
    """Stands in for whatever serves /connect/: answers a WebSocket handshake with 101, then echoes bytes."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.heard: list[str] = []

    def run(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                head = b""
                while b"\r\n\r\n" not in head:
                    head += conn.recv(4096)
                text = head.decode()
                self.heard.append(text)
                key = re.search(r"(?im)^sec-websocket-key: *(\S+)", text)
                magic = (key[1] if key else "").encode() + b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
                accept = base64.b64encode(hashlib.sha1(magic).digest()).decode()  # noqa: S324 (RFC 6455 says SHA-1)
                conn.sendall(f"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                             f"Sec-WebSocket-Accept: {accept}\r\n\r\n".encode())  # fmt: skip
                data = conn.recv(4096)
                conn.sendall(data)


@pytest.fixture
def front(cast, tmp_path):
    """nginx on two ports before two gunicorn web processes; yields what the tests need."""
    tls = tmp_path / "tls"
    tls.mkdir()
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=gridlane.test",
         "-addext", "subjectAltName=DNS:gridlane.test", "-keyout", str(tls / "key.pem"), "-out", str(tls / "cert.pem")],
        check=True, capture_output=True,
    )  # fmt: skip
    env = production_env(database_url(connection.settings_dict), tmp_path / "var", GRIDLANE_TRUSTED_PROXIES="127.0.0.2",
                         GRIDLANE_OPS_NETWORKS="127.0.0.1/32", GRIDLANE_OPS_TOKEN=SCRAPE_TOKEN)  # fmt: skip
    webs, http, https = [free_port(), free_port()], free_port(), free_port()
    echo = EchoWebSocket()
    echo.start()
    prefix = tmp_path / "nginx"
    prefix.mkdir()
    (prefix / "site.conf").write_text(render_site(http, https, webs, echo.port, tls))
    (prefix / "nginx.conf").write_text(f"""
        worker_processes 1;
        pid {prefix}/nginx.pid;
        error_log {prefix}/error.log warn;
        {"user root;" if os.geteuid() == 0 else ""}
        events {{ worker_connections 256; }}
        http {{
            access_log {prefix}/access.log;
            client_body_temp_path {prefix}/body;
            proxy_temp_path {prefix}/proxy;
            fastcgi_temp_path {prefix}/fastcgi;
            uwsgi_temp_path {prefix}/uwsgi;
            scgi_temp_path {prefix}/scgi;
            include {prefix}/site.conf;
        }}
    """)
    check = subprocess.run([NGINX, "-t", "-p", str(prefix), "-c", str(prefix / "nginx.conf")], capture_output=True,
                           text=True)  # fmt: skip
    assert check.returncode == 0, check.stderr
    with gunicorn(env, webs[0], tmp_path / "web-1.log"), gunicorn(env, webs[1], tmp_path / "web-2.log"):
        proxy = subprocess.Popen([NGINX, "-p", str(prefix), "-c", str(prefix / "nginx.conf"), "-g", "daemon off;"],
                                 stderr=subprocess.PIPE, start_new_session=True)  # fmt: skip
        try:
            context = ssl.create_default_context(cafile=str(tls / "cert.pem"))
            wait_for(lambda: proxy.poll() is None and https_get(https, "/healthz", context)[0] == 200, "nginx")
            yield {"https": https, "http": http, "webs": webs, "context": context, "echo": echo, "logs": tmp_path}
        finally:
            os.killpg(proxy.pid, signal.SIGTERM)
            proxy.wait(timeout=30)
            echo.sock.close()


SCRAPE_TOKEN = "scrape-" + "x" * 32
UNLISTED = "127.0.0.3"  # a client on a network IT does not list (see the module's docstring)


def tls_socket(port: int, context: ssl.SSLContext, source: str = "127.0.0.1") -> ssl.SSLSocket:
    raw = socket.create_connection(("127.0.0.1", port), timeout=30, source_address=(source, 0))
    return context.wrap_socket(raw, server_hostname="gridlane.test")


def https_request(port: int, context: ssl.SSLContext, request: bytes, source: str = "127.0.0.1") -> bytes:
    with tls_socket(port, context, source) as s:
        s.sendall(request)
        answer = b""
        while chunk := s.recv(65536):
            answer += chunk
        return answer


def https_get(
    port: int, path: str, context: ssl.SSLContext, extra: str = "", source: str = "127.0.0.1"
) -> tuple[int, bytes]:
    answer = https_request(port, context, f"GET {path} HTTP/1.1\r\nHost: gridlane.test\r\n{extra}"
                                          "Connection: close\r\n\r\n".encode(), source)  # fmt: skip
    return int(answer.split(b" ", 2)[1]), answer


def test_tls_ends_at_the_proxy_and_both_web_processes_serve(front):
    for _ in range(6):
        status, answer = https_get(front["https"], "/readyz?check=database", front["context"])
        assert status == 200, answer[:500]
    head = answer.split(b"\r\n\r\n")[0].decode()
    assert len(re.findall(r"(?im)^x-request-id: [0-9a-f]{32}$", head)) == 1  # nginx's id, kept by the web
    for log in ("web-1.log", "web-2.log"):
        assert "GET /readyz?check=database" in (front["logs"] / log).read_text()  # each took a share
    plain = socket.create_connection(("127.0.0.1", front["http"]), timeout=30)
    plain.sendall(b"GET /api/v1/ HTTP/1.1\r\nHost: gridlane.test\r\nConnection: close\r\n\r\n")
    assert plain.recv(4096).startswith(b"HTTP/1.1 301")  # plain HTTP is sent to HTTPS
    plain.close()


def test_a_body_over_the_limit_answers_413_in_the_apis_json(front):
    body = b'{"command": "' + b"x" * (2 * 1024 * 1024) + b'"}'
    request = (b"POST /api/v1/workloads/ HTTP/1.1\r\nHost: gridlane.test\r\nContent-Type: application/json\r\n"
               b"Content-Length: " + str(len(body)).encode() + b"\r\nConnection: close\r\n\r\n" + body)  # fmt: skip
    try:
        answer = https_request(front["https"], front["context"], request)
    except (ConnectionResetError, BrokenPipeError, ssl.SSLError) as error:
        pytest.fail(f"the proxy cut the upload instead of answering: {error}")
    head, _, payload = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 413"), head
    assert b"application/json" in head
    assert json.loads(payload)["errors"]["body"]


def test_the_connect_path_passes_a_websocket_upgrade(front):
    key = base64.b64encode(os.urandom(16)).decode()
    with tls_socket(front["https"], front["context"]) as s:
        upgrade = (
            f"GET /connect/nb-1/ HTTP/1.1\r\nHost: gridlane.test\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n"
        )
        s.sendall(upgrade.encode())
        head = b""
        while b"\r\n\r\n" not in head:
            head += s.recv(4096)
        assert head.startswith(b"HTTP/1.1 101"), head
        s.sendall(b"\x81\x84abcd" + bytes(c ^ m for c, m in zip(b"ping", b"abcd", strict=True)))
        assert s.recv(4096) == b"\x81\x84abcd" + bytes(c ^ m for c, m in zip(b"ping", b"abcd", strict=True))
    heard = front["echo"].heard[-1]
    assert re.search(r"(?im)^upgrade: websocket", heard)
    assert re.search(r"(?im)^connection: upgrade", heard)
    assert re.search(r"(?im)^x-forwarded-proto: https", heard)


def test_forwarded_headers_count_only_from_the_proxy(front):
    # Through the proxy, over TLS: the web believes the proxy's X-Forwarded-Proto, and serves.
    status, answer = https_get(front["https"], "/api/v1/", front["context"], "X-Forwarded-Proto: http\r\n")
    assert status in (200, 401, 403), answer[:300]  # not sent back to HTTPS: the proxy said https, not the client
    # Straight at a web process, a client's own X-Forwarded-Proto is dropped: it is sent to HTTPS.
    web = socket.create_connection(("127.0.0.1", front["webs"][0]), timeout=30)
    web.sendall(b"GET /api/v1/ HTTP/1.1\r\nHost: gridlane.test\r\nX-Forwarded-Proto: https\r\n"
                b"X-Forwarded-For: 203.0.113.9\r\nConnection: close\r\n\r\n")  # fmt: skip
    answer = web.recv(4096)
    web.close()
    assert answer.startswith(b"HTTP/1.1 301"), answer[:300]
    assert b"Location: https://gridlane.test/api/v1/" in answer


def body_of(answer: bytes) -> bytes:
    head, _, body = answer.partition(b"\r\n\r\n")
    if re.search(rb"(?im)^transfer-encoding: chunked", head):
        out, rest = b"", body
        while rest:
            size, _, rest = rest.partition(b"\r\n")
            n = int(size, 16)
            if not n:
                break
            out, rest = out + rest[:n], rest[n + 2 :]
        return out
    return body


def plain_get(port: int, path: str, source: str, extra: str = "") -> tuple[int, bytes]:
    with socket.create_connection(("127.0.0.1", port), timeout=30, source_address=(source, 0)) as s:
        s.sendall(f"GET {path} HTTP/1.1\r\nHost: gridlane.test\r\nX-Forwarded-Proto: https\r\n{extra}"
                  "Connection: close\r\n\r\n".encode())  # fmt: skip
        answer = b""
        while chunk := s.recv(65536):
            answer += chunk
    return int(answer.split(b" ", 2)[1]), answer


def test_operational_endpoints_answer_in_detail_only_to_its_networks_through_the_shipped_site(front):
    https, context = front["https"], front["context"]
    status, answer = https_get(https, "/metrics", context)
    assert status == 200, answer[:300]
    assert b"gridlane_database_up" in body_of(answer)
    status, answer = https_get(https, "/readyz", context)
    assert "checks" in json.loads(body_of(answer))

    # From a network IT does not list: the site refuses /metrics, and /readyz is a status code and nothing more.
    status, answer = https_get(https, "/metrics", context, source=UNLISTED)
    assert status == 403, answer[:300]
    assert b"gridlane_" not in answer
    for path in ("/readyz", "/readyz?check=database", "/readyz?check=fabrics"):
        status, answer = https_get(https, path, context, source=UNLISTED)
        assert status in (200, 503), answer[:300]
        assert set(json.loads(body_of(answer))) == {"ready"}, answer[:300]
    status, answer = https_get(https, "/readyz?check=database", context, source=UNLISTED)
    assert status == 200  # the web processes' probe keeps its plain status code


def test_a_web_process_asked_directly_checks_the_address_too_and_takes_the_scrape_token(front):
    web = front["webs"][0]
    status, answer = plain_get(web, "/metrics", UNLISTED)
    assert status == 403, answer[:300]
    assert json.loads(body_of(answer))["errors"]["authorization"]
    status, answer = plain_get(web, "/metrics", UNLISTED, f"Authorization: Bearer {SCRAPE_TOKEN}\r\n")
    assert status == 200, answer[:300]
    status, answer = plain_get(web, "/metrics", UNLISTED, "Authorization: Bearer wrong\r\n")
    assert status == 403
    # A client that names itself the proxy's client is not believed: it is not the proxy.
    status, answer = plain_get(web, "/metrics", UNLISTED, "X-Forwarded-For: 127.0.0.1\r\n")
    assert status == 403
