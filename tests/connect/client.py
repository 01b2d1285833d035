"""A plain HTTP client for the connect tests: no redirects followed, raw paths sent as written."""

from __future__ import annotations

import http.client
import json
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit


@dataclass
class Answer:
    status: int
    headers: http.client.HTTPMessage
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)

    @property
    def text(self) -> str:
        return self.body.decode("utf-8", "replace")


def call(base: str, method: str, path: str, body: bytes | None = None, **headers: str) -> Answer:
    """One request, the path sent byte for byte as given (no normalisation, no redirects followed)."""
    where = urlsplit(base)
    conn = http.client.HTTPConnection(where.hostname or "127.0.0.1", where.port, timeout=60)
    try:
        names = {k.replace("_", "-"): v for k, v in headers.items()}
        conn.putrequest(method, path, skip_host="Host" in names, skip_accept_encoding=True)
        for name, value in names.items():
            conn.putheader(name, value)
        if body is not None:
            conn.putheader("Content-Length", str(len(body)))
        conn.endheaders(body)
        answer = conn.getresponse()
        return Answer(answer.status, answer.headers, answer.read())
    finally:
        conn.close()
