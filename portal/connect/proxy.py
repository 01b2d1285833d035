"""The connect path as an ASGI app: each HTTP request and WebSocket under /connect/<workload id>/ is checked
by `gate` and, when it passes, goes to that workload's own server and nowhere else, streamed both ways.

What goes on and what does not:
- to the server: the request as sent, minus the portal's own cookies and credentials (they would let the
  job act as the person on the portal), with the server's token added (`Authorization: token ...`, as
  Jupyter takes it) and Host and Origin made the server's own (its same-origin checks then hold: the portal
  has already refused cross-site requests itself);
- back: the answer, minus hop-by-hop headers; cookies the server sets are kept to the workload's path (and
  never under the portal's cookie names), a redirect to the server's own address comes back relative, and
  the token is taken out of every header and every body, whatever its type and coding (portal.connect.scrub:
  JupyterLab writes it into its page; an app may echo it anywhere), so no browser sees it.

Bodies stream in both directions in the chunks they arrive in: a 1 GB download or upload holds a few chunks
in memory at a time, and server-sent events reach the browser as they are sent. A client that goes away
ends the transfer. The components are kept ones: uvicorn speaks HTTP and WebSocket with the browser (under
gunicorn in production), aiohttp's client with the server (a pooled connector); this module only checks,
copies and rewrites.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from http.cookies import CookieError, SimpleCookie
from typing import Any
from urllib.parse import quote, unquote_to_bytes, urlsplit

import aiohttp
from asgiref.sync import sync_to_async
from django.conf import settings
from django.http.cookie import parse_cookie
from django.urls import reverse
from yarl import URL

from fabrics.base import Endpoint
from fabrics.jupyter import base_url
from portal.connect import gate, pages, scrub, tunnel

log = logging.getLogger("gridlane.connect")

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[Mapping[str, Any]], Awaitable[None]]

# /connect/<workload id>/<rest>, on the raw (still percent-encoded) path.
_PATH = re.compile(rb"/connect/([0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12})(/.*)?")
# Never passed on, either way: they describe one connection, not the message (RFC 9110 7.6.1), or they are
# the portal's and the server's own business.
_HOP = frozenset(
    {
        b"connection", b"keep-alive", b"proxy-authenticate", b"proxy-authorization", b"proxy-connection", b"te",
        b"trailer", b"transfer-encoding", b"upgrade", b"host", b"origin", b"referer", b"authorization", b"cookie",
        b"accept-encoding", b"forwarded", b"x-forwarded-for", b"x-forwarded-host", b"x-forwarded-proto",
        b"sec-websocket-key", b"sec-websocket-version", b"sec-websocket-extensions", b"sec-websocket-protocol",
    }
)  # fmt: skip
_BACK_DROP = frozenset(
    {b"connection", b"keep-alive", b"proxy-authenticate", b"proxy-connection", b"te", b"trailer",
     b"transfer-encoding", b"upgrade", b"service-worker-allowed"}
)  # fmt: skip
_SAFE = frozenset({"GET", "HEAD", "OPTIONS"})
READ_BUFFER = 1024 * 1024  # what is read from a server ahead of the browser
WHOLE_BYTES = 256 * 1024  # an answer of known length up to this is read whole (one send); larger ones stream
DECISIONS_KEPT = 10_000  # per process; past that, the expired go (and, if that is not enough, all)
# WebSocket close codes an endpoint may send (RFC 6455 7.4): the others are for reporting only.
_SENDABLE = frozenset({1000, 1001, 1002, 1003, 1007, 1008, 1009, 1010, 1011, 1012, 1013, 1014})


class ClientGone(Exception):
    """The browser went away while its request body was still coming."""


class ConnectApp:
    """The ASGI app for /connect/. One per process: its aiohttp session pools connections to servers, and its
    decisions are kept for a moment (see `decide`)."""

    def __init__(self, decide: Callable[[str, str, str], gate.Decision] = gate.decide) -> None:
        self._decide = sync_to_async(decide, thread_sensitive=False)
        self._session: aiohttp.ClientSession | None = None
        self._decided: dict[bytes, tuple[float, gate.Decision]] = {}

    async def decide(self, workload_id: str, scope: Scope) -> gate.Decision:
        """The gate's decision for this request's credentials and workload. A page loads dozens of files at
        once, so a decision is kept for GRIDLANE_CONNECT_DECISION_S (2 s): signing out, a sharing switched off
        or a workload stopped takes effect within that. Kept per credential, as a digest, in this process."""
        cookies, authorization = _header(scope, b"cookie"), _header(scope, b"authorization")
        session = parse_cookie(cookies).get(settings.SESSION_COOKIE_NAME, "")
        key = hashlib.sha256(f"{workload_id}\0{session}\0{authorization}".encode()).digest()
        now = time.monotonic()
        kept = self._decided.get(key)
        if kept is not None and kept[0] > now:
            return kept[1]
        decision = await self._decide(workload_id, cookies, authorization)
        if len(self._decided) >= DECISIONS_KEPT:
            self._decided = {k: v for k, v in self._decided.items() if v[0] > now}
            if len(self._decided) >= DECISIONS_KEPT:
                self._decided.clear()
        self._decided[key] = (now + settings.GRIDLANE_CONNECT_DECISION_S, decision)
        return decision

    def session(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=0, limit_per_host=64, ttl_dns_cache=60),
                cookie_jar=aiohttp.DummyCookieJar(),  # cookies are the browser's, never kept here
                auto_decompress=False,  # bytes pass as the server sent them
                skip_auto_headers=("User-Agent", "Accept-Encoding"),
                read_bufsize=READ_BUFFER,
            )
        return self._session

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            await self.http(scope, receive, send)
        elif scope["type"] == "websocket":
            await self.websocket(scope, receive, send)

    # --- HTTP ---------------------------------------------------------------------------------------------

    async def http(self, scope: Scope, receive: Receive, send: Send) -> None:
        wants_html = "text/html" in _header(scope, b"accept")
        where = parse(scope)
        if where is None:
            return await _page(send, pages.BAD_PATH, wants_html)
        workload_id, rest = where
        if not rest:  # /connect/<id>: the server's pages are relative to /connect/<id>/
            return await _redirect(send, _prefix(workload_id) + _query(scope), 308)
        if scope["method"] not in _SAFE and not same_origin(scope):
            return await _page(send, pages.CROSS_SITE, wants_html)
        decision = await self.decide(workload_id, scope)
        if decision.verdict != gate.Verdict.PASS or decision.server is None:
            return await _refuse(scope, send, decision, wants_html)
        route = await tunnel.route(decision)
        url = upstream_url(route, workload_id, rest, scope)
        has_body = _has_body(scope)
        body_done = asyncio.Event()
        if not has_body:
            body_done.set()
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=settings.GRIDLANE_CONNECT_TIMEOUT_S)
        started = False
        try:
            asking = self.session().request(
                scope["method"], url, headers=upstream_headers(scope, decision.server),
                data=_body(receive, body_done) if has_body else None, allow_redirects=False, timeout=timeout,
            )  # fmt: skip
            answer = await _answer(asking, body_done, settings.GRIDLANE_CONNECT_ANSWER_S)
            async with answer:
                headers, body = downstream_headers(answer, workload_id, route, decision.server)
                length = answer.content_length
                if length is not None and length <= WHOLE_BYTES:  # most answers: one read, one send
                    whole = body.feed(await answer.read()) + body.end()
                    if scope["method"] != "HEAD" and answer.status not in (204, 304):
                        headers.append((b"content-length", str(len(whole)).encode()))
                    await send({"type": "http.response.start", "status": answer.status, "headers": headers})
                    started = True
                    await send({"type": "http.response.body", "body": whole})
                    return None
                await send({"type": "http.response.start", "status": answer.status, "headers": headers})
                started = True
                await _stream(answer.content, send, receive, body_done, body)
        except ClientGone:
            return None
        except scrub.Unreadable as error:
            log.info("connect %s: %s", workload_id, error)
            if not started:
                await _page(send, pages.unreadable(str(error)), wants_html)
            else:
                await send({"type": "http.response.body", "body": b"", "more_body": False})
        except TimeoutError:
            if not started:
                await _page(send, pages.TOO_SLOW, wants_html)
        except (aiohttp.ClientError, OSError) as error:
            log.info("connect %s: %s", workload_id, type(error).__name__)
            if not started:
                await _page(send, pages.NO_ROUTE, wants_html)
            else:
                await send({"type": "http.response.body", "body": b"", "more_body": False})
        return None

    # --- WebSocket ----------------------------------------------------------------------------------------

    async def websocket(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (await receive())["type"] != "websocket.connect":
            return
        where = parse(scope)
        if where is None or not where[1] or not same_origin(scope):
            return await send({"type": "websocket.close", "code": 1008})  # before accept: a 403 to the browser
        workload_id, rest = where
        decision = await self.decide(workload_id, scope)
        if decision.verdict != gate.Verdict.PASS or decision.server is None:
            return await send({"type": "websocket.close", "code": 1008})
        route = await tunnel.route(decision)
        url = upstream_url(route, workload_id, rest, scope, websocket=True)
        try:
            upstream = await self.session().ws_connect(
                url, headers=upstream_headers(scope, decision.server), protocols=scope.get("subprotocols", ()),
                max_msg_size=settings.GRIDLANE_CONNECT_WS_MAX_BYTES, autoping=True,
                timeout=aiohttp.ClientWSTimeout(ws_receive=None, ws_close=10),
            )  # fmt: skip
        except (aiohttp.ClientError, OSError, TimeoutError) as error:
            log.info("connect %s: websocket %s", workload_id, type(error).__name__)
            return await send({"type": "websocket.close", "code": 1011})
        async with upstream:
            await send({"type": "websocket.accept", "subprotocol": upstream.protocol})
            await _pump(upstream, receive, send, decision.server.token)
        return None


async def _pump(upstream: aiohttp.ClientWebSocketResponse, receive: Receive, send: Send, secret: str = "") -> None:
    """Frames both ways until either side closes; the other is then closed with the same code. The server's
    messages reach the browser without its secret."""

    async def browser_to_server() -> None:
        while True:
            message = await receive()
            if message["type"] == "websocket.disconnect":
                code = message.get("code", 1000)
                await upstream.close(code=code if code in _SENDABLE else 1000)
                return
            if message.get("text") is not None:
                await upstream.send_str(message["text"])
            elif message.get("bytes") is not None:
                await upstream.send_bytes(message["bytes"])

    async def server_to_browser() -> None:
        async for message in upstream:
            if message.type == aiohttp.WSMsgType.TEXT:
                await send({"type": "websocket.send", "text": scrub.message(message.data, secret)})
            elif message.type == aiohttp.WSMsgType.BINARY:
                await send({"type": "websocket.send", "bytes": scrub.message(message.data, secret)})
        code = upstream.close_code
        with contextlib.suppress(Exception):  # the browser may be gone already
            await send({"type": "websocket.close", "code": code if code in _SENDABLE else 1000})

    tasks = [asyncio.ensure_future(browser_to_server()), asyncio.ensure_future(server_to_browser())]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await asyncio.gather(*tasks, return_exceptions=True)


# --- The request's path and headers -----------------------------------------------------------------------


def parse(scope: Scope) -> tuple[str, bytes] | None:
    """(workload id, the rest of the raw path) of a request under /connect/; None for a path that leaves it:
    a `.` or `..` segment (however encoded), an encoded slash or backslash, a NUL, a backslash."""
    raw: bytes = scope.get("raw_path") or scope["path"].encode("utf-8", "surrogateescape")
    raw = raw.split(b"?", 1)[0]
    match = _PATH.fullmatch(raw)
    if match is None:
        return None
    rest = match.group(2) or b""
    lowered = rest.lower()
    if any(bad in lowered for bad in (b"%2f", b"%5c", b"\\", b"%00", b"\x00")):
        return None
    if any(unquote_to_bytes(segment) in (b".", b"..") for segment in rest.split(b"/")):
        return None
    return match.group(1).decode().lower(), rest


def upstream_url(server: Endpoint, workload_id: str, rest: bytes, scope: Scope, websocket: bool = False) -> URL:
    """The server's URL for this request: under the connect path for a server that serves from it (a notebook's
    Jupyter), else under the server's own root. Only the path and query come from the request, as sent."""
    path = rest.decode("latin-1")
    if server.path != "/":
        path = _prefix(workload_id)[:-1] + path
    base = base_url(Endpoint(server.host, server.port, server.token, "/"))[:-1]
    if websocket:
        base = "ws" + base[len("http") :]
    return URL(base + path + _query(scope), encoded=True)


def upstream_headers(scope: Scope, server: Endpoint) -> dict[str, str]:
    """The request's headers for the server: its own minus _HOP and the portal's cookies, plus the server's
    Host, Origin (when the browser sent one) and token."""
    headers: dict[str, str] = {}
    for name, value in scope["headers"]:
        if name.lower() not in _HOP:
            key = name.decode("latin-1")
            headers[key] = headers[key] + ", " + value.decode("latin-1") if key in headers else value.decode("latin-1")
    cookies = _their_cookies(_header(scope, b"cookie"))
    if cookies:
        headers["Cookie"] = cookies
    where = f"[{server.host}]" if ":" in server.host else server.host
    headers["Host"] = f"{where}:{server.port}"
    if _header(scope, b"origin"):
        headers["Origin"] = f"http://{where}:{server.port}"
    if server.token:
        headers["Authorization"] = f"token {server.token}"
    headers["Accept-Encoding"] = "identity"  # the token is taken out of every answer: best plain (scrub reads others)
    return headers


def downstream_headers(
    answer: aiohttp.ClientResponse, workload_id: str, route: Endpoint, server: Endpoint
) -> tuple[list[tuple[bytes, bytes]], scrub.Body]:
    """The answer's headers for the browser, every value without the server's token, and its body's reader:
    decoded (the browser gets identity) and without the token (its length is the proxy's to give);
    scrub.Unreadable for a body in a coding the proxy cannot read."""
    body = scrub.Body(server.token.encode(), answer.headers.get("Content-Encoding", ""))
    headers: list[tuple[bytes, bytes]] = []
    for name, value in answer.raw_headers:
        lowered = name.lower()
        if lowered in _BACK_DROP or lowered in (b"content-length", b"content-encoding"):
            continue
        text = value.decode("latin-1")
        if lowered == b"set-cookie":
            kept = _cookie_for_path(text, _prefix(workload_id))
            if kept is None:
                continue
            text = kept
        elif lowered == b"location":
            text = _location(text, workload_id, route, server)
        text = scrub.header(text, server.token)
        headers.append((name, text.encode("latin-1", "replace")))
    return headers, body


def same_origin(scope: Scope) -> bool:
    """A request without Origin (not from a page's script), or from a page on the portal's own host."""
    origin = _header(scope, b"origin")
    if not origin:
        return True
    host = _header(scope, b"host").lower()
    trusted = {urlsplit(o).netloc.lower() for o in settings.CSRF_TRUSTED_ORIGINS}
    return urlsplit(origin).netloc.lower() in ({host} | trusted) and bool(host)


def portal_cookies() -> frozenset[str]:
    return frozenset({settings.SESSION_COOKIE_NAME, settings.CSRF_COOKIE_NAME, settings.LANGUAGE_COOKIE_NAME})


def _their_cookies(header: str) -> str:
    """The Cookie header minus the portal's own cookies (the session would let the job act as the person)."""
    ours = portal_cookies()
    kept = [part.strip() for part in header.split(";") if part.strip() and part.split("=", 1)[0].strip() not in ours]
    return "; ".join(kept)


def _cookie_for_path(header: str, prefix: str) -> str | None:
    """A Set-Cookie from the server, kept to the workload's path and host; None for one that would set a
    cookie of the portal's (or cannot be read)."""
    try:
        jar: SimpleCookie = SimpleCookie()
        jar.load(header)
    except CookieError:
        return None
    if len(jar) != 1:
        return None
    ((name, morsel),) = jar.items()
    if name in portal_cookies() or name.lower().startswith(("__host-", "__secure-")):
        return None
    path = morsel["path"] or "/"
    if not path.startswith(prefix):
        morsel["path"] = prefix
    morsel["domain"] = ""
    return morsel.OutputString()


def _location(value: str, workload_id: str, route: Endpoint, server: Endpoint) -> str:
    """A redirect to the server's own address (or its root) comes back under the workload's connect path."""
    parts = urlsplit(value)
    where = f"[{server.host}]" if ":" in server.host else server.host
    own = {f"{where}:{server.port}".lower(), f"{route.host}:{route.port}".lower()}
    if parts.netloc and parts.netloc.lower() not in own:
        return value  # somewhere else altogether: the browser goes there itself
    path = parts.path or "/"
    if server.path == "/" and path.startswith("/"):
        path = _prefix(workload_id) + path[1:]
    return path + (f"?{parts.query}" if parts.query else "") + (f"#{parts.fragment}" if parts.fragment else "")


# --- Small pieces ---------------------------------------------------------------------------------------


def _prefix(workload_id: str) -> str:
    return reverse("connect:root", args=[workload_id])


def _header(scope: Scope, name: bytes) -> str:
    values = [v.decode("latin-1") for k, v in scope["headers"] if k.lower() == name]
    return ", ".join(values) if name != b"cookie" else "; ".join(values)


def _query(scope: Scope) -> str:
    query: bytes = scope.get("query_string", b"")
    return "?" + query.decode("latin-1") if query else ""


def _has_body(scope: Scope) -> bool:
    length = _header(scope, b"content-length").strip()
    return bool(_header(scope, b"transfer-encoding")) or (bool(length) and length != "0")


async def _answer(
    asking: Awaitable[aiohttp.ClientResponse], body_done: asyncio.Event, limit_s: float
) -> aiohttp.ClientResponse:
    """The server's answer (its status and headers): it has `limit_s` from the end of the request's body
    (an upload takes as long as it takes); TimeoutError past that."""
    task = asyncio.ensure_future(asking)
    sent = asyncio.ensure_future(body_done.wait())
    try:
        await asyncio.wait([task, sent], return_when=asyncio.FIRST_COMPLETED)
        if not task.done():
            await asyncio.wait_for(asyncio.shield(task), limit_s)
        return task.result()
    except BaseException:
        task.cancel()
        raise
    finally:
        sent.cancel()


async def _body(receive: Receive, done: asyncio.Event) -> AsyncIterator[bytes]:
    """The request body as it arrives."""
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientGone
        if message.get("body"):
            yield message["body"]
        if not message.get("more_body"):
            done.set()
            return


async def _stream(
    content: aiohttp.StreamReader, send: Send, receive: Receive, body_done: asyncio.Event, body: scrub.Body
) -> None:
    """The answer's body to the browser as it comes (whatever has arrived: events are not held back), until it
    ends or the browser goes away."""
    gone = asyncio.Event()

    async def watch() -> None:
        await body_done.wait()  # the body generator reads `receive` until then
        while (await receive())["type"] != "http.disconnect":
            pass
        gone.set()

    watcher = asyncio.ensure_future(watch())
    try:
        async for chunk in content.iter_any():
            if gone.is_set():
                return
            out = body.feed(chunk)
            if out:
                await send({"type": "http.response.body", "body": out, "more_body": True})
        await send({"type": "http.response.body", "body": body.end(), "more_body": False})
    finally:
        watcher.cancel()


async def _refuse(scope: Scope, send: Send, decision: gate.Decision, wants_html: bool) -> None:
    if decision.verdict == gate.Verdict.SIGN_IN:
        if scope["method"] in ("GET", "HEAD") and wants_html:
            here = scope.get("raw_path", b"").decode("latin-1") or scope["path"]
            return await _redirect(send, f"{reverse(settings.LOGIN_URL)}?next={quote(here + _query(scope), safe='')}")
        return await _page(send, pages.Page(401, "Sign in", "Sign in to Gridlane first, or send an API token."),
                           wants_html)  # fmt: skip
    if decision.verdict == gate.Verdict.STOPPED:
        return await _page(send, pages.stopped(decision.words), wants_html)
    if decision.verdict == gate.Verdict.STARTING:
        return await _page(send, pages.starting(decision.words), wants_html)
    if decision.verdict == gate.Verdict.UNREACHABLE:
        return await _page(send, pages.unreachable(decision.words), wants_html)
    return await _page(send, pages.NOT_FOUND, wants_html)


async def _page(send: Send, page: pages.Page, wants_html: bool) -> None:
    headers, body = pages.render(page, wants_html)
    await send({"type": "http.response.start", "status": page.status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def _redirect(send: Send, location: str, status: int = 302) -> None:
    headers: Iterable[tuple[bytes, bytes]] = [(b"location", location.encode("latin-1")), (b"content-length", b"0")]
    await send({"type": "http.response.start", "status": status, "headers": list(headers)})
    await send({"type": "http.response.body", "body": b""})
