"""How the portal reaches a job's server: directly, or, for a fabric with `"connect_via": "ssh"`, through its
login node over the fabric's own SSH connection (fabrics.ssh.forward), for nodes it cannot route to.

One SSH connection per fabric and one local forward per server, kept for the life of the process and
replaced when IT changes the fabric's settings. Used by the connect proxy and the worker's idle check alike.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Mapping
from typing import Any

from fabrics.base import Endpoint
from fabrics.ssh.forward import Forward
from fabrics.ssh.settings import SshSettings
from fabrics.ssh.transport import SshTransport
from portal.connect import gate

_lock = threading.Lock()
_transports: dict[int, tuple[str, SshTransport]] = {}
_forwards: dict[tuple[int, str, str, int], Forward] = {}


def reachable(fabric_id: int | None, settings: Mapping[str, Any] | None, server: Endpoint) -> Endpoint:
    """Where to connect to reach `server`: itself, or a loopback port carried through the login node."""
    if fabric_id is None or settings is None or settings.get("connect_via", "direct") != "ssh":
        return server
    version = json.dumps(dict(settings), sort_keys=True, default=str)
    with _lock:
        held = _transports.get(fabric_id)
        if held is None or held[0] != version:
            if held is not None:
                held[1].close()
                for key in [k for k in _forwards if k[0] == fabric_id]:
                    _forwards.pop(key).close()
            held = (version, SshTransport(SshSettings.from_settings(settings)))
            _transports[fabric_id] = held
        key = (fabric_id, version, server.host, server.port)
        forward = _forwards.get(key)
        if forward is None:
            transport = held[1]
            forward = Forward(lambda: transport.open_tunnel(server.host, server.port))
            _forwards[key] = forward
    return Endpoint("127.0.0.1", forward.port, server.token, server.path)


async def route(decision: gate.Decision) -> Endpoint:
    """`reachable` for a request the gate passed (from the event loop: a new forward opens in a thread)."""
    server = decision.address or decision.server  # the address checked (portal.connect.server_reach)
    if server is None:
        raise ValueError("only a decision that passes has a server to route to")
    if (decision.fabric_settings or {}).get("connect_via", "direct") != "ssh":
        return server
    return await asyncio.to_thread(reachable, decision.fabric_id, decision.fabric_settings, server)
