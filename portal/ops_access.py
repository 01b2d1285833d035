"""Who may read the operational endpoints in detail (/metrics, /readyz with its checks): a client on a network
IT lists (GRIDLANE_OPS_NETWORKS, default loopback), or one that sends the scrape token
(`Authorization: Bearer <GRIDLANE_OPS_TOKEN>`, when IT has set one). Anyone else gets /readyz's status code
alone (probes need nothing more) and /metrics refused: team names, per-team load, fabric names and database
errors are IT's to read.

The client's address is REMOTE_ADDR as portal.serving.ForwardedMiddleware leaves it: the connection's, or
the client's as a trusted front proxy saw it.
"""

from __future__ import annotations

import hmac
import ipaddress

from django.conf import settings
from django.http import HttpRequest

from portal import outbound


def allowed(request: HttpRequest) -> bool:
    """Whether this request may read the operational endpoints in detail."""
    token = settings.GRIDLANE_OPS_TOKEN
    scheme, _, given = str(request.headers.get("Authorization", "")).strip().partition(" ")
    if token and scheme.lower() == "bearer" and hmac.compare_digest(given.strip().encode(), token.encode()):
        return True
    try:
        address = ipaddress.ip_address(str(request.META.get("REMOTE_ADDR", "")).split("%", 1)[0])
    except ValueError:
        return False
    inner = outbound.carried(address)
    return any(address in net or (inner is not None and inner in net) for net in networks())


def networks() -> list[outbound.Network]:
    return outbound.networks(settings.GRIDLANE_OPS_NETWORKS)
