"""Keystone v3 and Nova v2.1 on loopback, in process: the real paths, headers and JSON shapes of the OpenStack
API reference, for the OpenStack provider to talk real HTTP to.

Keystone issues tokens for application credentials (POST /identity/v3/auth/tokens: 201, the token in the
X-Subject-Token header, a service catalog in the body). Nova (/compute/v2.1) lists flavors, creates servers
(validating the body as Nova's schema does), lists and shows them, deletes them, and enforces an instance quota.
As in Nova, scheduling happens after the create's 202: a new server is BUILD with task state "scheduling"; each
read of it moves it on (to spawning, then ACTIVE), or to ERROR with a "No valid host" fault where `no_host` says
so. A deleted server is listed once more with task state "deleting", then no more.

Rules answer a request with an error instead (throttling, a server error), delay it past the client's timeout,
or let it through and hold the answer until released (to stop a worker between its create and its record).
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import json
import re
import threading
import time
import urllib.parse
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

PROJECT = "5d2f0e4a8c1b4e7f9a3d6c0b1e2f3a4b"
USER = "c8a1f5b2d3e44f6a8b9c0d1e2f3a4b5c"
REGION = "RegionOne"
KEYSTONE = "/identity/v3"
NOVA = "/compute/v2.1"
UNAUTHORIZED = {"error": {"code": 401, "title": "Unauthorized",
                          "message": "The request you have made requires authentication."}}  # fmt: skip
# Nova's server create schema (v2.1): the keys it takes; any other is refused as an additional property.
CREATE_KEYS = {
    "name", "imageRef", "flavorRef", "adminPass", "metadata", "networks", "OS-DCF:diskConfig", "accessIPv4",
    "accessIPv6", "personality", "availability_zone", "user_data", "key_name", "security_groups", "config_drive",
    "block_device_mapping", "block_device_mapping_v2", "min_count", "max_count", "return_reservation_id",
}  # fmt: skip
METADATA_KEY = re.compile(r"^[a-zA-Z0-9-_:. ]{1,255}$")


@dataclass
class Rule:
    method: str
    path: str  # a regular expression searched in the path after the service root: r"^/servers$"
    status: int = 0  # answer with this instead; 0: let it through (then `hold` or `delay` apply)
    body: dict[str, Any] = field(default_factory=dict)
    headers: dict[str, str] = field(default_factory=dict)
    times: int = 1 << 30
    hold: bool = False  # let it through, then hold the answer until the test releases it
    delay: float = 0.0  # answer this late (past the client's timeout: it sees none)


def nova_error(status: int, message: str) -> dict[str, Any]:
    """Nova's error body: {"badRequest": {"code": 400, "message": "..."}}."""
    key = {400: "badRequest", 403: "forbidden", 404: "itemNotFound", 409: "conflictingRequest", 413: "overLimit",
           429: "overLimit"}.get(status, "computeFault")  # fmt: skip
    return {key: {"code": status, "message": message}}


@dataclass
class Cloud:
    url: str = ""
    credentials: dict[str, str] = field(default_factory=dict)  # application credential id -> secret
    flavors: dict[str, str] = field(default_factory=dict)  # name -> id
    images: set[str] = field(default_factory=set)
    zones: set[str] = field(default_factory=lambda: {"nova"})
    quota_instances: int = 10
    no_host: set[tuple[str, str]] = field(default_factory=set)  # (flavor name, zone); zone "" for every zone
    servers: dict[str, dict[str, Any]] = field(default_factory=dict)
    user_data: dict[str, str] = field(default_factory=dict)  # server id -> decoded user data
    tokens: set[str] = field(default_factory=set)
    rules: list[Rule] = field(default_factory=list)
    seen: list[tuple[str, str]] = field(default_factory=list)  # (method, path)
    bodies: list[dict[str, Any]] = field(default_factory=list)  # server create bodies, as sent
    held: threading.Event = field(default_factory=threading.Event)
    release: threading.Event = field(default_factory=threading.Event)
    lock: threading.RLock = field(default_factory=threading.RLock)

    @property
    def auth_url(self) -> str:
        return self.url + KEYSTONE

    def calls(self, method: str, pattern: str) -> list[str]:
        with self.lock:
            return [p for m, p in self.seen if m == method and re.search(pattern, p)]

    def expire_tokens(self) -> None:
        with self.lock:
            self.tokens.clear()

    def states(self, pool: str) -> dict[str, str]:
        """The pool's servers that are not being deleted, by status (looking moves nothing on)."""
        with self.lock:
            return {
                s["id"]: s["status"]
                for s in self.servers.values()
                if s["metadata"].get("gridlane:pool") == pool and s["OS-EXT-STS:task_state"] != "deleting"
            }

    def add_server(self, name: str, flavor: str, metadata: dict[str, str], zone: str = "nova") -> str:
        """A server someone else created in the project (an orphan, or another tool's), already ACTIVE."""
        with self.lock:
            server = self._server(name, self.flavors[flavor], next(iter(self.images)), metadata, zone)
            server.update({"status": "ACTIVE", "OS-EXT-STS:task_state": None, "OS-EXT-STS:vm_state": "active"})
            return str(server["id"])

    # -- Keystone ---------------------------------------------------------------------------------------
    def issue(self, body: Any) -> tuple[int, dict[str, str], dict[str, Any]]:
        identity = (body.get("auth") or {}).get("identity") if isinstance(body, dict) else None
        if not isinstance(identity, dict) or "application_credential" not in (identity.get("methods") or []):
            return 400, {}, {"error": {"code": 400, "title": "Bad Request",
                                       "message": "Invalid input for field 'identity'"}}  # fmt: skip
        cred = identity.get("application_credential") or {}
        if not isinstance(cred, dict) or not cred.get("secret") or not cred.get("id"):
            return 400, {}, {"error": {"code": 400, "title": "Bad Request",
                                       "message": "Invalid input for field 'application_credential'"}}  # fmt: skip
        if self.credentials.get(str(cred["id"])) != cred["secret"]:
            return 401, {}, UNAUTHORIZED
        token = "gAAAAA" + uuid.uuid4().hex + uuid.uuid4().hex
        with self.lock:
            self.tokens.add(token)
        now = datetime.now(UTC)

        def endpoints(root: str) -> list[dict[str, Any]]:
            return [{"id": uuid.uuid4().hex, "interface": interface, "region_id": REGION, "region": REGION,
                     "url": self.url + root} for interface in ("public", "internal", "admin")]  # fmt: skip

        catalog = [
            {"id": uuid.uuid4().hex, "type": "identity", "name": "keystone", "endpoints": endpoints(KEYSTONE)},
            {"id": uuid.uuid4().hex, "type": "compute", "name": "nova", "endpoints": endpoints(NOVA)},
            {"id": uuid.uuid4().hex, "type": "image", "name": "glance", "endpoints": endpoints("/image")},
        ]
        answer = {"token": {
            "methods": ["application_credential"], "audit_ids": [uuid.uuid4().hex[:22]],
            "issued_at": now.isoformat().replace("+00:00", "Z"),
            "expires_at": (now + timedelta(hours=1)).isoformat().replace("+00:00", "Z"),
            "user": {"id": USER, "name": "gridlane-burst", "domain": {"id": "default", "name": "Default"}},
            "project": {"id": PROJECT, "name": "burst", "domain": {"id": "default", "name": "Default"}},
            "roles": [{"id": uuid.uuid4().hex, "name": "member"}],
            "application_credential": {"id": cred["id"], "name": "gridlane", "restricted": True},
            "catalog": catalog,
        }}  # fmt: skip
        return 201, {"X-Subject-Token": token}, answer

    # -- Nova -------------------------------------------------------------------------------------------
    def list_flavors(self, query: dict[str, str]) -> dict[str, Any]:
        rows = sorted(((fid, name) for name, fid in self.flavors.items()), key=lambda r: r[0])
        page, more = _page(rows, query, key=lambda r: r[0])
        answer: dict[str, Any] = {"flavors": [
            {"id": fid, "name": name, "links": self._links("flavors", fid)} for fid, name in page
        ]}  # fmt: skip
        if more:
            answer["flavors_links"] = [{"rel": "next", "href": self._next("flavors", query, page[-1][0])}]
        return answer

    def create(self, body: Any) -> tuple[int, dict[str, str], dict[str, Any]]:
        server = body.get("server") if isinstance(body, dict) else None
        if not isinstance(server, dict):
            return 400, {}, nova_error(400, "Invalid input for field/attribute server. Value: None. 'server' is a "
                                       "required property")  # fmt: skip
        extra = sorted(set(server) - CREATE_KEYS)
        if extra:
            return 400, {}, nova_error(400, f"Invalid input for field/attribute server. Additional properties are "
                                       f"not allowed ({', '.join(repr(e) for e in extra)} was unexpected)")  # fmt: skip
        for key in ("name", "flavorRef", "imageRef"):
            if not isinstance(server.get(key), str) or not server[key]:
                return 400, {}, nova_error(400, f"Invalid input for field/attribute {key}. '{key}' is a required "
                                           "property")  # fmt: skip
        metadata = server.get("metadata", {})
        if (
            not isinstance(metadata, dict)
            or len(metadata) > 128
            or not all(METADATA_KEY.match(k) and isinstance(v, str) and len(v) <= 255 for k, v in metadata.items())
        ):
            return 400, {}, nova_error(400, "Invalid input for field/attribute metadata.")
        user_data = server.get("user_data", "")
        try:
            decoded = base64.b64decode(user_data, validate=True).decode() if user_data else ""
        except (binascii.Error, UnicodeDecodeError):
            return 400, {}, nova_error(400, "Invalid input for field/attribute user_data. Value: ... is not a "
                                       "valid base64 string")  # fmt: skip
        if len(user_data) > 65535:
            return 400, {}, nova_error(400, "Invalid input for field/attribute user_data. Too long.")
        flavor_id = str(server["flavorRef"]).rstrip("/").rsplit("/", 1)[-1]
        if flavor_id not in self.flavors.values():
            return 400, {}, nova_error(400, f"Flavor {flavor_id} could not be found.")
        if str(server["imageRef"]).rstrip("/").rsplit("/", 1)[-1] not in self.images:
            return 400, {}, nova_error(400, "Can not find requested image")
        zone = server.get("availability_zone") or "nova"
        if zone not in self.zones:
            return 400, {}, nova_error(400, "The requested availability zone is not available")
        with self.lock:
            used = sum(1 for s in self.servers.values() if s["OS-EXT-STS:task_state"] != "deleting")
            if used >= self.quota_instances:
                return 403, {}, nova_error(403, f"Quota exceeded for instances: Requested 1, but already used {used} "
                                           f"of {self.quota_instances} instances")  # fmt: skip
            self.bodies.append(server)
            created = self._server(server["name"], flavor_id, server["imageRef"], metadata, zone)
            self.user_data[created["id"]] = decoded
        answer = {"server": {"id": created["id"], "links": created["links"], "OS-DCF:diskConfig": "MANUAL",
                             "security_groups": [{"name": "default"}], "adminPass": uuid.uuid4().hex[:12]}}  # fmt: skip
        return 202, {"Location": created["links"][0]["href"]}, answer

    def _server(self, name: str, flavor_id: str, image: str, metadata: dict[str, str], zone: str) -> dict[str, Any]:
        server_id = str(uuid.uuid4())
        now = datetime.now(UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z")
        flavor_name = next(n for n, i in self.flavors.items() if i == flavor_id)
        server = {
            "id": server_id, "name": name, "status": "BUILD", "tenant_id": PROJECT, "user_id": USER,
            "metadata": dict(metadata), "hostId": "", "created": now, "updated": now, "addresses": {},
            "accessIPv4": "", "accessIPv6": "", "progress": 0, "key_name": None, "config_drive": "",
            "image": {"id": image, "links": self._links("images", image)},
            "flavor": {"id": flavor_id, "links": self._links("flavors", flavor_id)},
            "links": self._links("servers", server_id), "OS-DCF:diskConfig": "MANUAL",
            "OS-EXT-AZ:availability_zone": "", "OS-EXT-STS:task_state": "scheduling",
            "OS-EXT-STS:vm_state": "building", "OS-EXT-STS:power_state": 0, "OS-SRV-USG:launched_at": None,
            "OS-SRV-USG:terminated_at": None, "security_groups": [{"name": "default"}],
            "os-extended-volumes:volumes_attached": [],
            "_no_host": (flavor_name, zone) in self.no_host or (flavor_name, "") in self.no_host, "_zone": zone,
        }  # fmt: skip
        self.servers[server_id] = server
        return server

    def _move_on(self, server: dict[str, Any]) -> None:
        """One step of Nova's own work on a server, taken each time it is read."""
        now = datetime.now(UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z")
        task = server["OS-EXT-STS:task_state"]
        if task == "deleting":
            server["_gone"] = True
        elif task == "scheduling" and server["_no_host"]:
            server.update({"status": "ERROR", "OS-EXT-STS:task_state": None, "OS-EXT-STS:vm_state": "error",
                           "fault": {"code": 500, "created": now, "message": "No valid host was found. There are "
                                     "not enough hosts available."}})  # fmt: skip
        elif task == "scheduling":
            server.update({"OS-EXT-STS:task_state": "spawning", "OS-EXT-AZ:availability_zone": server["_zone"],
                           "hostId": uuid.uuid4().hex})  # fmt: skip
        elif task == "spawning":
            server.update({"status": "ACTIVE", "OS-EXT-STS:task_state": None, "OS-EXT-STS:vm_state": "active",
                           "OS-EXT-STS:power_state": 1, "OS-SRV-USG:launched_at": now, "progress": 100})  # fmt: skip

    def show(self, server_id: str) -> tuple[int, dict[str, Any]]:
        with self.lock:
            server = self.servers.get(server_id)
            if server is None or server.get("_gone"):
                return 404, nova_error(404, f"Instance {server_id} could not be found.")
            answer = {"server": _public(server)}
            self._move_on(server)
            return 200, answer

    def list_servers(self, query: dict[str, str]) -> dict[str, Any]:
        with self.lock:
            for gone in [k for k, s in self.servers.items() if s.get("_gone")]:
                del self.servers[gone]
            rows = sorted(self.servers.values(), key=lambda s: (s["created"], s["id"]), reverse=True)
            page, more = _page(rows, query, key=lambda s: s["id"])
            answer: dict[str, Any] = {"servers": [_public(s) for s in page]}
            for server in page:
                self._move_on(server)
        if more:
            answer["servers_links"] = [{"rel": "next", "href": self._next("servers/detail", query, page[-1]["id"])}]
        return answer

    def delete(self, server_id: str) -> tuple[int, dict[str, Any]]:
        with self.lock:
            server = self.servers.get(server_id)
            if server is None or server.get("_gone"):
                return 404, nova_error(404, f"Instance {server_id} could not be found.")
            server["OS-EXT-STS:task_state"] = "deleting"
            return 204, {}

    def _links(self, kind: str, ident: str) -> list[dict[str, str]]:
        return [{"rel": "self", "href": f"{self.url}{NOVA}/{kind}/{ident}"},
                {"rel": "bookmark", "href": f"{self.url}/compute/{kind}/{ident}"}]  # fmt: skip

    def _next(self, path: str, query: dict[str, str], marker: str) -> str:
        return f"{self.url}{NOVA}/{path}?{urllib.parse.urlencode(query | {'marker': marker})}"

    def rule_for(self, method: str, path: str) -> Rule | None:
        with self.lock:
            for rule in self.rules:
                if rule.times > 0 and rule.method == method and re.search(rule.path, path):
                    rule.times -= 1
                    return rule
        return None


def _public(server: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in server.items() if not k.startswith("_")}


def _page(rows: list[Any], query: dict[str, str], key: Any) -> tuple[list[Any], bool]:
    """Nova's paging: `limit` rows after `marker`; a next link when the page is full."""
    limit = int(query.get("limit", 1000))
    marker = query.get("marker")
    if marker:
        at = next((i for i, r in enumerate(rows) if key(r) == marker), None)
        rows = rows[at + 1 :] if at is not None else []
    page = rows[:limit]
    return page, len(page) == limit


def _handler(cloud: Cloud) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:  # quiet
            pass

        def _reply(self, status: int, body: Any, headers: dict[str, str] | None = None) -> None:
            raw = json.dumps(body).encode() if status != 204 else b""
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)

        def _serve(self, method: str) -> None:
            parts = urllib.parse.urlsplit(self.path)
            query = {k: v[0] for k, v in urllib.parse.parse_qs(parts.query).items()}
            raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            with cloud.lock:
                cloud.seen.append((method, parts.path))
            try:
                body = json.loads(raw) if raw else None
            except ValueError:
                self._reply(400, nova_error(400, "Malformed request body"))
                return
            service, path = (KEYSTONE, parts.path[len(KEYSTONE) :]) if parts.path.startswith(KEYSTONE) else (
                NOVA, parts.path[len(NOVA) :])  # fmt: skip
            rule = cloud.rule_for(method, path)
            if rule is not None and rule.status:
                self._reply(rule.status, rule.body, rule.headers)
                return
            status, headers, answer = self._route(method, service, path, query, body)
            if rule is not None and rule.hold:
                cloud.held.set()
                cloud.release.wait(60)
            if rule is not None and rule.delay:
                time.sleep(rule.delay)
            with contextlib.suppress(OSError):
                self._reply(status, answer, headers)

        def _route(self, method: str, service: str, path: str, query: dict[str, str],
                   body: Any) -> tuple[int, dict[str, str], Any]:  # fmt: skip
            if service == KEYSTONE:
                if (method, path) == ("POST", "/auth/tokens"):
                    return cloud.issue(body)
                return 404, {}, {"error": {"code": 404, "title": "Not Found", "message": "Not found"}}
            if not self.path.startswith(NOVA):
                return 404, {}, nova_error(404, "Not found")
            if self.headers.get("X-Auth-Token", "") not in cloud.tokens:
                return 401, {"WWW-Authenticate": f"Keystone uri='{cloud.auth_url}'"}, UNAUTHORIZED
            match = re.fullmatch(r"/servers/([0-9a-f-]+)", path)
            if (method, path) == ("GET", "/flavors"):
                return 200, {}, cloud.list_flavors(query)
            if (method, path) == ("POST", "/servers"):
                return cloud.create(body)
            if (method, path) == ("GET", "/servers/detail"):
                return 200, {}, cloud.list_servers(query)
            if method == "GET" and match:
                status, answer = cloud.show(match.group(1))
                return status, {}, answer
            if method == "DELETE" and match:
                status, answer = cloud.delete(match.group(1))
                return status, {}, answer
            return 404, {}, nova_error(404, "The resource could not be found.")

        def do_GET(self) -> None:
            self._serve("GET")

        def do_POST(self) -> None:
            self._serve("POST")

        def do_DELETE(self) -> None:
            self._serve("DELETE")

    return Handler


@contextlib.contextmanager
def openstack_cloud(**settings: Any) -> Iterator[Cloud]:
    cloud = Cloud(**settings)
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(cloud))
    server.daemon_threads = True
    cloud.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield cloud
    finally:
        cloud.release.set()
        server.shutdown()
        server.server_close()
