"""Asking a notebook's Jupyter server how it is used: its status API, and its kernels when it has been quiet.

The local fabric asks the servers it runs on this host; the worker asks those a batch cluster's jobs
reported (fabrics.ssh.notebook), as JupyterHub's batchspawner reaches a node's server directly. Each
request has a short timeout, and a `Budget` bounds all the requests of one poll or cycle, so a hung
server never stalls the worker. No proxy is used: the server is on this host or on the cluster's network.
"""

from __future__ import annotations

import json
import time
import urllib.request
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from fabrics.base import Endpoint

PROBE_TIMEOUT_S = 0.5  # per request to a notebook's server
PROBE_BUDGET_S = 2.0  # for all of one poll's (or one cycle's) requests
BUSY_CHECK_AFTER_S = 60.0  # past this long without activity, a notebook's kernels are asked if one is busy

_DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))


class Budget:
    """Seconds left for asking servers, shared by every probe of one poll or cycle; only probing spends it."""

    def __init__(self, seconds: float = PROBE_BUDGET_S, per_probe_s: float = PROBE_TIMEOUT_S) -> None:
        self.left_s = seconds
        self.per_probe_s = per_probe_s

    @property
    def spent(self) -> bool:
        return self.left_s <= 0

    def probe(self, server: Endpoint) -> tuple[bool, datetime | None]:
        """`probe` within what is left; (False, None) once the budget is spent (the rest are asked next time)."""
        if self.spent:
            return False, None
        started = time.monotonic()
        try:
            return probe(server, min(self.per_probe_s, self.left_s))
        finally:
            self.left_s -= time.monotonic() - started


def probe(
    server: Endpoint, timeout: float, busy_check_after_s: float = BUSY_CHECK_AFTER_S
) -> tuple[bool, datetime | None]:
    """Ask a Jupyter server how it is used: (whether it answered, its last activity).

    Its status API is the readiness signal and the measure of use. It does not count itself as activity,
    and neither does a request marked no_track_activity. A kernel busy with a long silent computation
    sends nothing, so past `busy_check_after_s` of quiet the kernels are asked too: a busy one is use now.
    """
    base, headers = base_url(server) + "api", {"Authorization": f"token {server.token}"}
    started = time.monotonic()
    # {"started": "...", "last_activity": "2025-05-01T12:00:00.123456Z", "kernels": 1, "connections": 1}
    status = _get_json(f"{base}/status", headers, timeout)
    if not isinstance(status, dict):
        return False, None
    try:
        last_activity = parse_time(status.get("last_activity"))
    except ValueError:
        last_activity = None
    now = datetime.now(UTC)
    quiet = last_activity is not None and (now - last_activity).total_seconds() > busy_check_after_s
    left = timeout - (time.monotonic() - started)
    if quiet and status.get("kernels") and left > 0:
        # [{"id": "...", "execution_state": "busy", "last_activity": "...", "connections": 1}, ...]
        kernels = _get_json(f"{base}/kernels?no_track_activity=1", headers, left)
        if isinstance(kernels, list) and any(isinstance(k, dict) and k.get("execution_state") == "busy"
                                             for k in kernels):  # fmt: skip
            last_activity = now
    return True, last_activity


def base_url(server: Endpoint) -> str:
    """http://host:port/path/ of a server (an IPv6 address in brackets)."""
    where = f"[{server.host}]" if ":" in server.host else server.host
    path = server.path if server.path.endswith("/") else server.path + "/"
    return f"http://{where}:{server.port}{path}"


def parse_time(value: Any) -> datetime | None:
    """An aware datetime from ISO text; None when there is none."""
    if not value:
        return None
    parsed = datetime.fromisoformat(str(value))
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def _get_json(url: str, headers: Mapping[str, str], timeout: float) -> Any:
    """The JSON a URL answers with 200; None for any other answer, or none in time."""
    request = urllib.request.Request(url, headers=dict(headers))  # noqa: S310 (http to a notebook's server)
    try:
        with _DIRECT.open(request, timeout=timeout) as answer:
            if answer.status != 200:
                return None
            return json.loads(answer.read(65_536))
    except (OSError, ValueError):  # refused, timed out, an HTTP error, or not JSON
        return None
