"""A small JSON client for the Gridlane REST API, on the standard library alone."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any


class ApiError(Exception):
    """The API answered with an error, or could not be reached (status 0)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"{status}: {message}" if status else message)
        self.status = status


class Api:
    def __init__(self, server: str, token: str, timeout: float = 30.0) -> None:
        self.base = server.rstrip("/") + "/api/v1/"
        self.token = token
        self.timeout = timeout

    def call(self, method: str, path: str, body: Any = None, timeout: float | None = None) -> Any:
        """The decoded JSON answer; None for an empty one (204)."""
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.base + path.lstrip("/"), data=data, method=method)  # noqa: S310
        if self.token:  # none yet while a burst instance enrolls
            request.add_header("Authorization", f"Bearer {self.token}")
        request.add_header("Accept", "application/json")
        if data is not None:
            request.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(request, timeout=timeout or self.timeout) as response:  # noqa: S310
                raw = response.read()
        except urllib.error.HTTPError as error:
            raise ApiError(error.code, _message(error.read())) from None
        except (urllib.error.URLError, OSError) as error:
            raise ApiError(0, f"cannot reach {self.base}: {error}") from None
        return json.loads(raw) if raw else None

    def send(self, method: str, path: str, data: bytes | None = None, content_type: str = "") -> tuple[int, Any]:
        """A request with raw bytes (a code bundle): the status and headers of the answer, whatever the status;
        ApiError (status 0) only when the API cannot be reached."""
        request = urllib.request.Request(self.base + path.lstrip("/"), data=data, method=method)  # noqa: S310
        request.add_header("Authorization", f"Bearer {self.token}")
        if content_type:
            request.add_header("Content-Type", content_type)
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:  # noqa: S310
                response.read()
                return response.status, response.headers
        except urllib.error.HTTPError as error:
            if method != "HEAD" and error.code >= 400:
                raise ApiError(error.code, _message(error.read())) from None
            return error.code, error.headers
        except (urllib.error.URLError, OSError) as error:
            raise ApiError(0, f"cannot reach {self.base}: {error}") from None

    def get(self, path: str) -> Any:
        return self.call("GET", path)

    def post(self, path: str, body: Any = None, timeout: float | None = None) -> Any:
        return self.call("POST", path, body if body is not None else {}, timeout=timeout)


def _message(raw: bytes) -> str:
    """The API's errors as one line: `{"errors": {"queue": ["..."]}}` -> "queue: ..."; a bulk submit's
    `{"errors": {"items": {"3": {"name": ["..."]}}}}` -> "items.3.name: ..."."""
    try:
        return "; ".join(f"{field}: {' '.join(msgs)}" for field, msgs in _fields(json.loads(raw)["errors"]))
    except (ValueError, KeyError, TypeError, AttributeError):
        return raw.decode("utf-8", "replace")[:300]


def _fields(errors: dict[str, Any], prefix: str = "") -> list[tuple[str, list[str]]]:
    out: list[tuple[str, list[str]]] = []
    for field, value in errors.items():
        if isinstance(value, dict):
            out += _fields(value, f"{prefix}{field}.")
        else:
            out.append((f"{prefix}{field}", [str(v) for v in value]))
    return out
