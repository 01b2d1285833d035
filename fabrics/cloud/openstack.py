"""OpenStack Nova (compute API v2.1) with a Keystone v3 application credential, spoken over plain HTTP.

Servers carry their pool and launch id as metadata. Nova has no client token, so a launch looks its launch id up
first, and a crash between the create and its record is healed by the autoscaler's reconcile by tag, as on EC2.
Nova schedules after it answers the create, so "no valid host" arrives as a server in ERROR: the launch waits
for scheduling to end, deletes such a server and raises CAPACITY, so that the autoscaler moves on to the next
flavor or zone exactly as it does for EC2's InsufficientInstanceCapacity.

Six calls are all this needs (a token, the flavors, create, list, show, delete), so it uses the standard library
rather than openstacksdk, which brings eight more packages and takes seconds to import.
"""

from __future__ import annotations

import base64
import http.client
import json
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from fabrics.cloud.base import (
    LAUNCH_TAG,
    POOL_TAG,
    CloudError,
    ErrorKind,
    Instance,
    InstanceState,
    LaunchRequest,
    ProviderConfig,
)

SCHEDULE_POLL_S = 1.0  # how often a launch asks whether Nova has found a host
SCHEDULE_WAIT_S = 60.0  # past this the launch returns the server as pending; a later ERROR shows in describe
PAGE = 200

# Nova's server status -> ours; a table with a safe default. Statuses of a live server that comes back by itself
# (a reboot, a migration) count as running; those an operator must undo count as stopping: they serve no work.
_STATES = {
    "BUILD": InstanceState.PENDING,
    "ACTIVE": InstanceState.RUNNING,
    "REBOOT": InstanceState.RUNNING,
    "HARD_REBOOT": InstanceState.RUNNING,
    "PASSWORD": InstanceState.RUNNING,
    "MIGRATING": InstanceState.RUNNING,
    "RESIZE": InstanceState.RUNNING,
    "VERIFY_RESIZE": InstanceState.RUNNING,
    "REVERT_RESIZE": InstanceState.RUNNING,
    "REBUILD": InstanceState.RUNNING,
    "SHUTOFF": InstanceState.STOPPING,
    "SHELVED": InstanceState.STOPPING,
    "SHELVED_OFFLOADED": InstanceState.STOPPING,
    "SOFT_DELETED": InstanceState.STOPPING,
    "ERROR": InstanceState.STOPPING,
    "DELETED": InstanceState.TERMINATED,
}  # PAUSED, SUSPENDED, RESCUE, UNKNOWN: undetermined

_CODES = {400: "BadRequest", 401: "Unauthorized", 403: "Forbidden", 404: "NotFound", 409: "Conflict",
          413: "OverLimit", 429: "TooManyRequests"}  # fmt: skip


def keystone_v3(auth_url: str) -> str:
    """Keystone's v3 root from an auth URL as an openrc or clouds.yaml gives it (".../v3", or the bare service
    URL); ValueError saying what is wrong with it."""
    try:
        parts = urllib.parse.urlsplit(auth_url.strip())
        parts.port  # noqa: B018 (raises ValueError on a port that is not a number)
    except ValueError:
        raise ValueError(f"{auth_url!r} is not a URL.") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError('Give Keystone\'s auth URL, e.g. "https://keystone.example:5000/v3".')
    if parts.username or parts.password:
        raise ValueError("The auth URL must not carry a user or password: the credentials reference holds them.")
    if parts.query or parts.fragment:
        raise ValueError("The auth URL takes no query or fragment.")
    path = parts.path.rstrip("/")
    if path.endswith("/auth/tokens"):
        path = path.removesuffix("/auth/tokens")
    if path.endswith("/v2.0"):
        raise ValueError("Keystone's v2.0 API is gone: give the v3 auth URL (ending in /v3).")
    if not path.endswith("/v3"):
        path += "/v3"
    return urllib.parse.urlunsplit((parts.scheme, parts.netloc, path, "", ""))


def classify(status: int, body: bytes, retry_after: str = "", service: str = "Nova") -> CloudError:
    """An HTTP error answer as a CloudError whose kind says whether a retry, another flavor or IT can help."""
    message = _message(body)
    lowered = message.lower()
    code = _CODES.get(status, f"HTTP{status}")
    if status == 401:
        kind = ErrorKind.CREDENTIALS
    elif status in (403, 413) and "quota" in lowered:
        # Nova answers 403 for a project over its quota of instances, cores or RAM (413 before v2.1); a smaller
        # flavor may still fit, so it counts as no capacity, as EC2's InstanceLimitExceeded does.
        kind, code = ErrorKind.CAPACITY, "QuotaExceeded"
    elif status == 403:
        kind = ErrorKind.CREDENTIALS  # the policy does not let this credential do it
    elif status == 429 or (status == 413 and (retry_after or "rate" in lowered)):
        kind = ErrorKind.THROTTLED
    elif status >= 500:
        kind = ErrorKind.UNAVAILABLE
    else:
        kind = ErrorKind.INVALID  # 400, 404, 409, and 413 for user data too large
    wait = f" (retry after {retry_after} s)" if retry_after and kind == ErrorKind.THROTTLED else ""
    return CloudError(f"{service} {status} {code}: {message}{wait}".strip(), kind=kind, code=code)


def _message(body: bytes) -> str:
    """The message of an OpenStack error body: Nova's {"badRequest": {"code": 400, "message": "..."}}, Keystone's
    {"error": {"code": 401, "title": "Unauthorized", "message": "..."}}, a proxy's {"message": "..."}; else the
    text itself."""
    try:
        parsed = json.loads(body)
    except ValueError:
        return body.decode(errors="replace").strip()[:300]
    if isinstance(parsed, dict):
        if isinstance(parsed.get("message"), str):
            return str(parsed["message"])[:300]
        for value in parsed.values():
            if isinstance(value, dict) and "message" in value:
                return str(value["message"])[:300]
    return json.dumps(parsed)[:300]


def _fault(message: str) -> CloudError:
    """A server that went to ERROR while it was scheduled or built, by its fault's message."""
    lowered = message.lower()
    if "no valid host" in lowered or "exhausted all hosts" in lowered:
        return CloudError(f"Nova found no host: {message}", kind=ErrorKind.CAPACITY, code="NoValidHost")
    if "quota" in lowered:
        return CloudError(f"Nova: {message}", kind=ErrorKind.CAPACITY, code="QuotaExceeded")
    return CloudError(f"Nova could not build the server: {message}", kind=ErrorKind.UNAVAILABLE, code="BuildFailed")


class OpenStackProvider:
    def __init__(
        self,
        config: ProviderConfig,
        *,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.config = config
        self.sleep, self.clock = sleep, clock
        try:
            self.auth_url = keystone_v3(config.endpoint_url)
        except ValueError as error:
            raise CloudError(f"the pool's Keystone auth URL: {error}", kind=ErrorKind.INVALID) from None
        self._token = ""  # never logged, never in a message
        self._compute = ""
        self._flavors: dict[str, str] | None = None  # name -> id

    # -- the two services -----------------------------------------------------------------------------
    def _http(self, method: str, url: str, body: Any = None, headers: Mapping[str, str] | None = None,
              service: str = "Nova") -> tuple[http.client.HTTPMessage, Any]:  # fmt: skip
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(url, data=data, method=method)  # noqa: S310 (http(s): keystone_v3, the catalog)
        request.add_header("Accept", "application/json")
        if data is not None:
            request.add_header("Content-Type", "application/json")
        for name, value in (headers or {}).items():
            request.add_header(name, value)
        try:
            with urllib.request.urlopen(request, timeout=self.config.timeout_s) as answer:  # noqa: S310 (as above)
                raw = answer.read()
                return answer.headers, json.loads(raw) if raw.strip() else {}
        except urllib.error.HTTPError as error:
            raise classify(error.code, error.read(), error.headers.get("Retry-After", ""), service) from None
        except ValueError:
            raise CloudError(
                f"{service} answered with something that is not JSON", kind=ErrorKind.UNAVAILABLE
            ) from None
        except (urllib.error.URLError, OSError, http.client.HTTPException) as error:  # refused, timed out
            reason = getattr(error, "reason", error)
            raise CloudError(f"{service} did not answer: {reason}", kind=ErrorKind.UNAVAILABLE) from None

    def _login(self) -> None:
        """A token and the compute endpoint of the pool's region, from Keystone's catalog."""
        creds = self.config.credentials
        secret = {"id": creds.key_id, "secret": creds.secret}
        body = {"auth": {"identity": {"methods": ["application_credential"], "application_credential": secret}}}
        headers, answer = self._http("POST", f"{self.auth_url}/auth/tokens", body, service="Keystone")
        token = headers.get("X-Subject-Token", "")
        if not token:
            raise CloudError("Keystone issued no token (no X-Subject-Token header)", kind=ErrorKind.UNAVAILABLE)
        # "catalog": [{"type": "compute", "endpoints": [{"interface": "public", "region_id": "RegionOne",
        #              "url": "https://nova.example/v2.1"}, ...]}, ...]
        catalog = (answer.get("token") or {}).get("catalog") or []
        regions: set[str] = set()
        for service in catalog:
            if service.get("type") != "compute":
                continue
            for endpoint in service.get("endpoints") or []:
                if endpoint.get("interface") != "public":
                    continue
                region = str(endpoint.get("region_id") or endpoint.get("region") or "")
                regions.add(region)
                if region == self.config.region:
                    self._token, self._compute = token, str(endpoint["url"]).rstrip("/")
                    return
        known = f" (it has {', '.join(sorted(regions))})" if regions else ""
        raise CloudError(f"Keystone's catalog has no public compute endpoint in region {self.config.region!r}{known}",
                         kind=ErrorKind.INVALID, code="NoEndpoint")  # fmt: skip

    def _call(self, method: str, path: str, body: Any = None) -> tuple[http.client.HTTPMessage, Any]:
        """A Nova call; a token refused on the way (it expired) is replaced once."""
        for attempt in (0, 1):
            if not self._token:
                self._login()
            url = path if path.startswith("http") else self._compute + path
            try:
                return self._http(method, url, body, {"X-Auth-Token": self._token})
            except CloudError as error:
                if error.code != "Unauthorized" or attempt:
                    raise
                self._token = ""
        raise AssertionError("unreachable")

    # -- the interface ---------------------------------------------------------------------------------
    def launch(self, request: LaunchRequest) -> Instance:
        if request.spot:
            raise CloudError("OpenStack has no spot market: switch spot off for this pool", kind=ErrorKind.INVALID,
                             code="NoSpot")  # fmt: skip
        for found in self.find(request.pool, request.launch_id):
            if not found.state.gone:
                return found
        server: dict[str, Any] = {
            "name": request.name or f"{request.pool}-{request.launch_id[:8]}",
            "imageRef": request.image,
            "flavorRef": self._flavor_id(request.instance_type),
            "user_data": base64.b64encode(request.user_data.encode()).decode(),
            "metadata": {POOL_TAG: request.pool, LAUNCH_TAG: request.launch_id},
        }
        if request.zone:
            server["availability_zone"] = request.zone
        _, answer = self._call("POST", "/servers", {"server": server})  # 202 {"server": {"id": ..., "links": ...}}
        return self._scheduled(str(answer["server"]["id"]), request)

    def _scheduled(self, server_id: str, request: LaunchRequest) -> Instance:
        """Wait while Nova looks for a host; a server it found none for is deleted and raised as CAPACITY."""
        deadline = self.clock() + SCHEDULE_WAIT_S
        while True:
            _, answer = self._call("GET", f"/servers/{server_id}")
            raw = answer["server"]
            if raw.get("status") == "ERROR":
                self._delete(server_id)
                raise _fault(str((raw.get("fault") or {}).get("message", "no reason given")))
            # "OS-EXT-STS:task_state" is "scheduling" until a host is chosen; a cloud that hides it is not waited on.
            scheduling = raw.get("status") == "BUILD" and raw.get("OS-EXT-STS:task_state", "") == "scheduling"
            if not scheduling or self.clock() >= deadline:
                return _instance(raw, request.pool, {request.instance_type: self._flavor_id(request.instance_type)})
            self.sleep(SCHEDULE_POLL_S)

    def find(self, pool: str, launch_id: str) -> list[Instance]:
        """The servers one launch id names (one, or none)."""
        return [i for i in self.describe(pool) if i.launch_id == launch_id]

    def describe(self, pool: str) -> list[Instance]:
        """The pool's servers. Nova's list takes no metadata filter, so the project's servers are read page by
        page and picked by their pool metadata."""
        servers: list[dict[str, Any]] = []
        url = f"/servers/detail?limit={PAGE}"
        while url:
            _, answer = self._call("GET", url)
            servers.extend(s for s in answer.get("servers", []) if (s.get("metadata") or {}).get(POOL_TAG) == pool)
            url = next((str(link["href"]) for link in answer.get("servers_links", []) if link.get("rel") == "next"), "")
        flavors = self._flavor_ids() if servers else {}
        return [_instance(raw, pool, flavors) for raw in servers]

    def terminate(self, ids: Sequence[str]) -> None:
        for server_id in ids:
            self._delete(server_id)

    def _delete(self, server_id: str) -> None:
        try:
            self._call("DELETE", f"/servers/{urllib.parse.quote(server_id, safe='')}")
        except CloudError as error:
            if error.code != "NotFound":  # gone already
                raise

    # -- flavors: the pool names them, Nova takes their ids ------------------------------------------------
    def _flavor_ids(self) -> dict[str, str]:
        if self._flavors is None:
            flavors: dict[str, str] = {}
            url = f"/flavors?limit={PAGE}"
            while url:
                _, answer = self._call("GET", url)  # {"flavors": [{"id": "7", "name": "g1.a100x4", ...}], ...}
                flavors.update({str(f["name"]): str(f["id"]) for f in answer.get("flavors", [])})
                url = next((str(lk["href"]) for lk in answer.get("flavors_links", []) if lk.get("rel") == "next"), "")
            self._flavors = flavors
        return self._flavors

    def _flavor_id(self, name: str) -> str:
        flavors = self._flavor_ids()
        if name in flavors:
            return flavors[name]
        if name in flavors.values():  # the pool gave the id itself
            return name
        raise CloudError(f"Nova has no flavor {name!r} (the instance type) for this project", kind=ErrorKind.INVALID,
                         code="FlavorNotFound")  # fmt: skip


def _instance(raw: dict[str, Any], pool: str, flavors: Mapping[str, str]) -> Instance:
    """One Nova server as JSON: {"id": "...", "status": "ACTIVE", "OS-EXT-STS:task_state": null, "metadata": {...},
    "flavor": {"id": "7"}, "OS-EXT-AZ:availability_zone": "nova", "created": "2026-01-05T10:00:00Z", ...}."""
    meta = raw.get("metadata") or {}
    state = _STATES.get(str(raw.get("status", "")), InstanceState.UNDETERMINED)
    if raw.get("OS-EXT-STS:task_state") == "deleting":
        state = InstanceState.STOPPING
    flavor = raw.get("flavor") or {}
    names = {v: k for k, v in flavors.items()}
    flavor_name = str(flavor.get("original_name") or names.get(str(flavor.get("id", "")), flavor.get("id", "")))
    return Instance(
        id=str(raw["id"]),
        state=state,
        pool=str(meta.get(POOL_TAG, pool)),
        launch_id=str(meta.get(LAUNCH_TAG, "")),
        instance_type=flavor_name,
        zone=str(raw.get("OS-EXT-AZ:availability_zone") or ""),
        launched_at=_when(raw.get("created")),
        reason=str((raw.get("fault") or {}).get("message", ""))[:300],
    )


def _when(value: Any) -> datetime | None:
    """Nova's times are ISO 8601 in UTC: "2026-01-05T10:00:00Z" (older releases leave the zone out)."""
    try:
        when = datetime.fromisoformat(str(value)) if value else None
    except ValueError:
        return None
    return when.replace(tzinfo=UTC) if when is not None and when.tzinfo is None else when
