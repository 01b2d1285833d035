"""moto's EC2 in server mode on loopback, and a small proxy in front of it that answers as EC2 does when it
has no capacity, throttles or refuses a key: boto3 talks real HTTP to both.

The proxy forwards everything else to moto byte for byte. A rule matches the form fields of an EC2 query
(Action=RunInstances, InstanceType=g5.xlarge, ...) and answers with EC2's XML error instead, or forwards
and then holds the answer until released (to stop a worker between its request and recording the answer).
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

ERROR_XML = (
    '<?xml version="1.0" encoding="UTF-8"?>\n<Response><Errors><Error><Code>{code}</Code>'
    "<Message>{message}</Message></Error></Errors><RequestID>gridlane-test</RequestID></Response>"
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def moto_server(log: Path) -> Iterator[str]:
    """A moto server on a free loopback port; yields its URL and stops it (by its pid) afterwards."""
    port = free_port()
    with open(log, "w") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, "MOTO_EC2_ENABLE_INSTANCE_TYPE_VALIDATION": "true"},  # as EC2: unknown types refused
        )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(url + "/moto-api/", timeout=2).read()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"moto did not start: {log.read_text()[-2000:]}") from None
                time.sleep(0.1)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def reset(url: str) -> None:
    urllib.request.urlopen(urllib.request.Request(url + "/moto-api/reset", method="POST"), timeout=10).read()


@dataclass
class Rule:
    match: dict[str, str]  # form fields that must all be equal, e.g. {"Action": "RunInstances"}
    code: str = ""  # EC2's error code to answer with; empty: forward, then hold the answer
    times: int = 1 << 30  # how many requests it answers before it stops matching
    key_id: str = ""  # match on the signing key instead of (or beside) the form
    status: int = 400


@dataclass
class Proxy:
    upstream: str
    url: str = ""
    rules: list[Rule] = field(default_factory=list)
    seen: list[dict[str, str]] = field(default_factory=list)
    held: threading.Event = field(default_factory=threading.Event)  # set when a held request reached moto
    release: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def actions(self, name: str) -> list[dict[str, str]]:
        with self.lock:
            return [form for form in self.seen if form.get("Action") == name]

    def rule_for(self, form: dict[str, str], key_id: str) -> Rule | None:
        with self.lock:
            for rule in self.rules:
                if rule.times <= 0:
                    continue
                if rule.key_id and rule.key_id != key_id:
                    continue
                if all(form.get(k) == v for k, v in rule.match.items()):
                    rule.times -= 1
                    return rule
        return None


def _handler(proxy: Proxy) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:  # quiet
            pass

        def _forward(self, method: str, body: bytes) -> tuple[int, list[tuple[str, str]], bytes]:
            request = urllib.request.Request(proxy.upstream + self.path, data=body or None, method=method)
            for name, value in self.headers.items():
                if name.lower() not in ("host", "content-length", "connection"):
                    request.add_header(name, value)
            try:
                with urllib.request.urlopen(request, timeout=30) as answer:
                    return answer.status, list(answer.headers.items()), answer.read()
            except urllib.error.HTTPError as error:
                return error.code, list(error.headers.items()), error.read()

        def _reply(self, status: int, headers: list[tuple[str, str]], body: bytes) -> None:
            self.send_response(status)
            for name, value in headers:
                if name.lower() not in ("content-length", "transfer-encoding", "connection", "server", "date"):
                    self.send_header(name, value)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _serve(self, method: str) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            form = {k: v[0] for k, v in urllib.parse.parse_qs(body.decode(errors="replace")).items()}
            auth = self.headers.get("Authorization", "")  # "AWS4-HMAC-SHA256 Credential=KEYID/20261201/..."
            key_id = auth.partition("Credential=")[2].partition("/")[0]
            with proxy.lock:
                proxy.seen.append(form)
            rule = proxy.rule_for(form, key_id)
            if rule is not None and rule.code:
                message = f"{rule.code} (from the test proxy)"
                self._reply(rule.status, [("Content-Type", "text/xml")], ERROR_XML.format(code=rule.code,
                            message=message).encode())  # fmt: skip
                return
            answer = self._forward(method, body)
            if rule is not None:  # forwarded: hold the answer until the test lets it go
                proxy.held.set()
                proxy.release.wait(60)
            with contextlib.suppress(OSError):
                self._reply(*answer)

        def do_POST(self) -> None:
            self._serve("POST")

        def do_GET(self) -> None:
            self._serve("GET")

    return Handler


@contextlib.contextmanager
def fault_proxy(upstream: str) -> Iterator[Proxy]:
    proxy = Proxy(upstream)
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(proxy))
    server.daemon_threads = True
    proxy.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield proxy
    finally:
        proxy.release.set()
        server.shutdown()
        server.server_close()
