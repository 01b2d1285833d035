"""The app's token never leaves the proxy: a hostile app (a real HTTP server) puts it in every header, in
redirects, Refresh and cookies, and in bodies of many types, plain and compressed, small and streamed; the
browser gets none of it."""

from __future__ import annotations

import gzip
import http.server
import json
import secrets
import threading
import zlib
from collections.abc import Iterator
from typing import Any
from urllib.parse import parse_qs, quote, unquote, urlsplit

import brotli  # type: ignore[import-untyped]  # no type information shipped
import pytest

from portal.connect import scrub
from portal.workloads import notebook_endpoint
from tests.connect.client import call
from tests.connect.serving import session_cookie

TYPES = ["text/html; charset=utf-8", "application/json", "image/svg+xml", "image/png", "application/octet-stream",
         "font/woff2", "application/x-protobuf", ""]  # fmt: skip
ENCODINGS = ["identity", "gzip", "x-gzip", "deflate", "deflate-raw", "br", "gzip, br"]


def encode(body: bytes, coding: str) -> tuple[bytes, str]:
    """The body in a coding, and the Content-Encoding that says so ("deflate-raw": raw deflate, as some send)."""
    if coding == "identity":
        return body, ""
    if coding in ("gzip", "x-gzip"):
        return gzip.compress(body), coding
    if coding == "deflate":
        return zlib.compress(body), "deflate"
    if coding == "deflate-raw":
        raw = zlib.compressobj(wbits=-15)
        return raw.compress(body) + raw.flush(), "deflate"
    if coding == "br":
        return brotli.compress(body), "br"
    if coding == "gzip, br":
        return brotli.compress(gzip.compress(body)), "gzip, br"
    return body, coding  # one the proxy cannot read


class Hostile:
    def __init__(self, token: str) -> None:
        self.token = token
        hostile = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:
                query = {k: v[0] for k, v in parse_qs(urlsplit(self.path).query).items()}
                t = hostile.token
                size = int(query.get("size", "0"))
                filler = secrets.token_bytes(size) if size else b""
                body = b"<" + t.encode() + b">" + filler + t.encode() + b"tail" + t.encode()
                data, coding = encode(body, query.get("enc", "identity"))
                self.send_response(int(query.get("status", "200")))
                if query.get("type"):
                    self.send_header("Content-Type", query["type"])
                if coding:
                    self.send_header("Content-Encoding", coding)
                self.send_header("X-Token", t)
                self.send_header("Link", f"</x?token={t}>; rel=preload")
                self.send_header("Refresh", f"0; url=/next?token={t}")
                self.send_header("Set-Cookie", f"appkey={t}; Path=/")
                self.send_header("Set-Cookie", f"other=1; Path=/; Comment={quote(t)}")
                self.send_header("WWW-Authenticate", f'Token realm="{t}"')
                if query.get("location"):
                    self.send_header("Location", query["location"].replace("TOKEN", t))
                if query.get("chunked"):
                    self.send_header("Transfer-Encoding", "chunked")
                    self.end_headers()
                    for i in range(0, len(data), 7):  # small chunks: the token straddles them
                        piece = data[i : i + 7]
                        self.wfile.write(f"{len(piece):x}\r\n".encode() + piece + b"\r\n")
                    self.wfile.write(b"0\r\n\r\n")
                else:
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_port
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


@pytest.fixture
def hostile() -> Iterator[Hostile]:
    app = Hostile(secrets.token_urlsafe(24))
    yield app
    app.server.shutdown()
    app.server.server_close()


@pytest.fixture
def published(asgi_portal, alice, running, hostile):
    w = running(alice, kind="training")
    body = json.dumps({"host": "127.0.0.1", "port": hostile.port, "token": hostile.token}).encode()
    secret = notebook_endpoint.secret(w.run_id)
    answer = call(asgi_portal, "POST", f"/api/v1/workloads/{w.pk}/endpoint/", body,
                  Authorization=f"Bearer {secret}", Content_Type="application/json")  # fmt: skip
    assert answer.status == 204, answer.text
    return w


def fetch(asgi_portal: str, w: Any, alice: Any, query: str) -> Any:
    return call(asgi_portal, "GET", f"/connect/{w.pk}/answer?{query}", Cookie=session_cookie(alice))


def leaks(answer: Any, token: str) -> list[str]:
    """Where the token shows in what the browser got: header names, or "body"."""
    found = [name for name, value in answer.headers.items() if token in value or token in unquote(value)]
    return found + (["body"] if token.encode() in answer.body else [])


@pytest.mark.parametrize("kind", TYPES)
@pytest.mark.parametrize("coding", ENCODINGS)
def test_no_type_and_no_coding_lets_the_token_through(asgi_portal, published, alice, hostile, kind, coding):
    answer = fetch(asgi_portal, published, alice, f"type={quote(kind)}&enc={quote(coding)}")
    assert answer.status == 200
    assert leaks(answer, hostile.token) == []
    assert "Content-Encoding" not in answer.headers  # the browser gets what the proxy checked: identity
    assert answer.body == b"<>tail"


@pytest.mark.parametrize("coding", ["identity", "gzip", "deflate", "br"])
def test_a_streamed_body_loses_the_token_where_it_straddles_chunks(asgi_portal, published, alice, hostile, coding):
    answer = fetch(asgi_portal, published, alice, f"type=application/octet-stream&enc={coding}&size=300000&chunked=1")
    assert answer.status == 200
    assert leaks(answer, hostile.token) == []
    assert answer.body.startswith(b"<>")
    assert answer.body.endswith(b"tail")
    assert len(answer.body) == 300000 + len(b"<>tail")


@pytest.mark.parametrize(
    "location",
    ["http://elsewhere.example/?token=TOKEN", "/landing?token=TOKEN&x=1", "http://elsewhere.example/TOKEN/",
     "/q#TOKEN", "TOKEN"],
)  # fmt: skip
@pytest.mark.parametrize("status", [301, 302, 303, 307, 308])
def test_a_redirect_carries_no_token_wherever_it_points(asgi_portal, published, alice, hostile, location, status):
    answer = fetch(asgi_portal, published, alice, f"status={status}&type=image/png&location={quote(location)}")
    assert answer.status == status
    assert leaks(answer, hostile.token) == []
    assert "Location" in answer.headers  # a redirect still, with what is left of its address


def test_a_percent_encoded_token_in_a_redirect_is_taken_out_too(asgi_portal, published, alice, hostile):
    spelled = "".join(f"%{b:02X}" for b in hostile.token.encode())
    answer = fetch(asgi_portal, published, alice, f"status=302&location={quote('/x?t=' + spelled)}")
    assert leaks(answer, hostile.token) == []


def test_a_coding_the_proxy_cannot_read_is_not_passed_on(asgi_portal, published, alice, hostile):
    answer = fetch(asgi_portal, published, alice, "type=text/html&enc=zstd")
    assert answer.status == 502
    assert leaks(answer, hostile.token) == []


def test_the_body_reader_finds_a_token_split_anywhere_in_a_compressed_stream():
    token = b"s3cr3t-t0ken-abcdefghij"
    body = b"a" * 1000 + token + b"b" * 1000 + token
    for coding in ("gzip", "deflate", "br"):
        data = {"gzip": gzip.compress, "deflate": zlib.compress, "br": brotli.compress}[coding](body)
        reader = scrub.Body(token, coding)
        out = b"".join(reader.feed(data[i : i + 1]) for i in range(len(data))) + reader.end()
        assert out == b"a" * 1000 + b"b" * 1000


def test_a_websocket_message_loses_the_token_as_text_and_as_bytes():
    assert scrub.message("hello abc-token-123 bye", "abc-token-123") == "hello  bye"
    assert scrub.message(b"\x00abc-token-123\xff", "abc-token-123") == b"\x00\xff"


@pytest.mark.parametrize("coding", ["gzip", "deflate", "br"])
def test_a_body_that_would_expand_past_the_limit_is_refused_not_held(coding):
    zeros = bytes(scrub.INFLATE_MAX + 1024 * 1024)
    data = {"gzip": gzip.compress, "deflate": zlib.compress, "br": brotli.compress}[coding](zeros)
    assert len(data) < 1024 * 1024  # a small answer...
    with pytest.raises(scrub.Unreadable, match="expands past"):
        scrub.Body(b"secret-token-0123456789", coding).feed(data)  # ...that would fill the proxy's memory
