"""A small web app a training job might publish (in a thread of the test process): it tells what it was
sent, streams server-sent events on cue, takes and gives large bodies in chunks, and tries what a hostile app
might (set the portal's cookies, redirect to its own address)."""

from __future__ import annotations

import http.server
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

CHUNK = 1024 * 1024


@dataclass
class App:
    port: int
    token: str
    second_event: threading.Event = field(default_factory=threading.Event)
    received: list[int] = field(default_factory=list)  # bytes of each upload, as counted by the app


@contextmanager
def running_app(token: str) -> Iterator[App]:
    state: dict[str, App] = {}

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:
            app = state["app"]
            if self.path.startswith("/echo"):
                body = json.dumps({"path": self.path, "headers": dict(self.headers.items())}).encode()
                self._send(200, body, "application/json")
            elif self.path == "/cookies":
                self.send_response(200)
                self.send_header("Set-Cookie", "appcookie=1; Path=/; Domain=127.0.0.1")
                self.send_header("Set-Cookie", "sessionid=stolen; Path=/")
                self.send_header("Content-Length", "0")
                self.end_headers()
            elif self.path == "/away":
                self.send_response(302)
                self.send_header("Location", f"http://127.0.0.1:{app.port}/landing?x=1")
                self.send_header("Content-Length", "0")
                self.end_headers()
            elif self.path == "/events":
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Cache-Control", "no-cache")
                self.send_header("Connection", "close")
                self.end_headers()
                self.wfile.write(b"data: first\n\n")
                self.wfile.flush()
                app.second_event.wait(60)  # only once the test has read the first
                self.wfile.write(b"data: second\n\n")
                self.wfile.flush()
                self.close_connection = True
            elif self.path.startswith("/big"):
                size = int(self.path.split("=")[1])
                self.send_response(200)
                self.send_header("Content-Type", "application/octet-stream")
                self.send_header("Content-Length", str(size))
                self.end_headers()
                block = b"\x5a" * CHUNK
                for start in range(0, size, CHUNK):
                    self.wfile.write(block[: min(CHUNK, size - start)])
            else:
                self._send(200, b"<!doctype html><title>app</title><a href='echo'>echo</a>", "text/html")

        def do_POST(self) -> None:
            left, total = int(self.headers["Content-Length"]), 0
            while left:
                got = self.rfile.read(min(CHUNK, left))
                if not got:
                    break
                left, total = left - len(got), total + len(got)
            state["app"].received.append(total)
            self._send(200, json.dumps({"received": total}).encode(), "application/json")

        def _send(self, status: int, body: bytes, kind: str) -> None:
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    state["app"] = App(server.server_address[1], token)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield state["app"]
    finally:
        state["app"].second_event.set()
        server.shutdown()
        server.server_close()
