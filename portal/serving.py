"""How the web answers when things go wrong: a request id on every response and in every log line of the
request, 503 with Retry-After while the database is away, and JSON errors (never an HTML page) on the API.

Django turns an exception raised anywhere below the outermost middleware into a response through the error
handlers (`handler400`, `handler500` in portal/urls.py), which run inside the `except` that caught it: they
read the exception from there. Django's own `django.request` logger then logs every 5xx, with the request id.
"""

from __future__ import annotations

import contextlib
import contextvars
import ipaddress
import logging
import re
import sys
import uuid
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured, RequestDataTooBig
from django.db import DatabaseError, InterfaceError, OperationalError, connections
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.template import loader
from django.views import defaults

log = logging.getLogger("gridlane.web")

HEADER = "X-Request-ID"
# A proxy's id is kept when it looks like one (nginx's $request_id is 32 hex digits); anything else is replaced.
_GOOD_ID = re.compile(r"[A-Za-z0-9._-]{8,128}")
RETRY_AFTER_S = 5
# The database is away (stopped, restarting, unreachable): a connection failed or died under the request.
DATABASE_AWAY = (OperationalError, InterfaceError)

request_id: contextvars.ContextVar[str] = contextvars.ContextVar("request_id", default="-")


class RequestIdMiddleware:
    """Outermost: names the request (the proxy's X-Request-ID, else a new one) for the logs and the response."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        given = request.headers.get(HEADER, "")
        rid = given if _GOOD_ID.fullmatch(given) else uuid.uuid4().hex
        request.request_id = rid  # type: ignore[attr-defined]
        token = request_id.set(rid)
        try:
            response = self.get_response(request)
        finally:
            request_id.reset(token)
        response[HEADER] = rid
        return response


class RequestIdFilter(logging.Filter):
    """Puts the request id on every log record (`-` outside a request) for the formatter's %(request_id)s."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.request_id = request_id.get()
        return True


def wants_json(request: HttpRequest) -> bool:
    accept = request.headers.get("Accept", "")
    return request.path.startswith("/api/") or "text/html" not in accept


def errors(status: int, message: str, field: str = "detail") -> JsonResponse:
    """The API's one error shape, {"errors": {field: [message]}}."""
    return JsonResponse({"errors": {field: [message]}}, status=status)


def database_away(request: HttpRequest) -> HttpResponse:
    """503 while the database is away; the dead connection is dropped so that the next request opens a fresh
    one (CONN_HEALTH_CHECKS makes sure of it for connections that died between requests)."""
    for conn in connections.all(initialized_only=True):
        with contextlib.suppress(DatabaseError):  # dead already
            conn.close()
    rid = getattr(request, "request_id", request_id.get())
    message = f"Gridlane cannot reach its database just now; try again in {RETRY_AFTER_S} s (request {rid})."
    if wants_json(request):
        response: HttpResponse = errors(503, message)
    else:
        page = (
            f'<!doctype html><meta http-equiv="refresh" content="{RETRY_AFTER_S}">'
            f"<title>Gridlane: back shortly</title><p>{message}</p>"
        )
        response = HttpResponse(page, status=503)
    response["Retry-After"] = str(RETRY_AFTER_S)
    return response


def server_error(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
    """handler500: 503 when the database is away, JSON on the API, the error page elsewhere."""
    error = sys.exc_info()[1]
    if isinstance(error, DATABASE_AWAY):
        return database_away(request)
    rid = getattr(request, "request_id", request_id.get())
    if wants_json(request):
        return errors(500, f"Something went wrong on our side; IT can look it up by the request id {rid}.")
    # Drawn without the request's context (the fault may lie there), with the id the logs carry. An htmx
    # request swaps nothing on a 5xx: gridlane.js says so where the person acted, with the same id.
    return HttpResponse(loader.get_template("500.html").render({"request_id": rid}), status=500)


def bad_request(request: HttpRequest, exception: Exception, *args: Any, **kwargs: Any) -> HttpResponse:
    """handler400: a body over DATA_UPLOAD_MAX_MEMORY_SIZE is 413; JSON on the API, the error page elsewhere."""
    if isinstance(exception, RequestDataTooBig):
        return errors(413, "The request body is too large.", field="body")
    if wants_json(request):
        return errors(400, "Bad request.")
    return defaults.bad_request(request, exception)


class ForwardedMiddleware:
    """X-Forwarded-For, -Proto and -Host count only from a trusted front proxy (GRIDLANE_TRUSTED_PROXIES);
    from anyone else they are dropped, so that neither Django (SECURE_PROXY_SSL_HEADER) nor the audit believes
    a client that names itself. From the proxy, the client's address becomes REMOTE_ADDR (the proxy sets the
    header from the connection, so its last entry is the one it saw)."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response
        self.trusted = [ipaddress.ip_network(p, strict=False) for p in settings.GRIDLANE_TRUSTED_PROXIES]

    def from_proxy(self, address: str) -> bool:
        try:
            ip = ipaddress.ip_address(address)
        except ValueError:
            return False
        return any(ip in network for network in self.trusted)

    def __call__(self, request: HttpRequest) -> HttpResponse:
        meta = request.META
        if self.from_proxy(str(meta.get("REMOTE_ADDR", ""))):
            client = str(meta.get("HTTP_X_FORWARDED_FOR", "")).rsplit(",", 1)[-1].strip()
            if client:
                with contextlib.suppress(ValueError):  # not an address: keep the proxy's
                    meta["REMOTE_ADDR"] = str(ipaddress.ip_address(client))
        else:
            for name in ("HTTP_X_FORWARDED_FOR", "HTTP_X_FORWARDED_PROTO", "HTTP_X_FORWARDED_HOST"):
                meta.pop(name, None)
        return self.get_response(request)


def require_secret_key() -> None:
    """Refuse to start a web process or a worker without the shared secret key (demo mode makes its own)."""
    try:
        key = settings.SECRET_KEY
    except ImproperlyConfigured:  # Django's own word for an empty one
        key = ""
    if not key:
        raise ImproperlyConfigured(
            "GRIDLANE_SECRET_KEY is not set. Outside demo mode every web process and worker must share one "
            "secret key: put one in the environment file (python3 -c 'import secrets; "
            "print(secrets.token_urlsafe(50))' makes one), or set GRIDLANE_DEMO=1 for a local trial."
        )


def not_found(request: HttpRequest, exception: Exception, *args: Any, **kwargs: Any) -> HttpResponse:
    """handler404: JSON on the API (a path that matches nothing there is still the API), the page elsewhere."""
    if request.path.startswith("/api/"):
        return errors(404, "Not found.")
    return defaults.page_not_found(request, exception)
