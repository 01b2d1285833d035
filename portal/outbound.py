"""The one guard for every connection Gridlane makes on a person's or a job's word (a webhook, a job's web
server reached by the connect proxy or the idle check): which address it may reach, and a connection to
exactly that address.

Rules, in the order they are applied:
- A host is an IP address in any spelling the system's resolver would take (`2130706433`, `0177.0.0.1`,
  `0x7f.1`, `127.1`, `[::ffff:127.0.0.1]`, a trailing dot), or a DNS name. A literal is read here, never by
  the resolver; a name is resolved once, here, and every address it gives must pass.
- An address passes when it lies in a network the caller allows (IT's setting for that purpose, or the
  fabric's own nodes), or, where the caller accepts the public internet (webhooks), when it is a public
  address. Unspecified, broadcast and multicast addresses never pass. An IPv6 address that carries an IPv4 address
  (mapped, compatible, 6to4, NAT64, Teredo) is judged by the IPv4 address it carries as well.
- The connection goes to the address that was checked (`Checked.address`), never to the name again: a name
  that resolves elsewhere a moment later (DNS rebinding) changes nothing. No redirect is ever followed.

A refusal is `Refused`, whose message says why in words a person can act on; the caller names the field.
"""

from __future__ import annotations

import http.client
import ipaddress
import socket
import ssl
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network

_NAT64 = (ipaddress.ip_network("64:ff9b::/96"), ipaddress.ip_network("64:ff9b:1::/48"))
_BROADCAST = ipaddress.IPv4Address("255.255.255.255")
_V4_PART_MAX = (0xFFFFFFFF, 0xFFFFFF, 0xFFFF, 0xFF)  # inet_aton: the last part fills what the others leave


class Refused(ValueError):
    """The address may not be reached on this word; the message says why."""


@dataclass(frozen=True)
class Checked:
    """A host that passed: the name as given (for Host, TLS and messages) and the address to connect to."""

    host: str
    address: Address
    port: int

    @property
    def literal(self) -> str:
        """The address as a URL's host: `[::1]` for IPv6."""
        return f"[{self.address}]" if self.address.version == 6 else str(self.address)


def networks(entries: Iterable[str]) -> list[Network]:
    """The entries of a setting that are networks or addresses (`10.0.0.0/8`, `192.0.2.7`, `fd00::/8`);
    others (host names) are not networks and are left out."""
    found: list[Network] = []
    for entry in entries:
        try:
            found.append(ipaddress.ip_network(entry.strip(), strict=False))
        except ValueError:
            continue
    return found


def literal(host: str) -> Address | None:
    """The address a host names when it is an IP literal in any spelling the C resolver takes (decimal,
    octal and hex parts, one to four of them, a trailing dot, IPv6 in brackets, a zone); None for a name."""
    text = host.strip().rstrip(".").strip("[]")
    if "%" in text:
        text = text.split("%", 1)[0]  # an IPv6 zone: the address is the same
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        pass
    parts = text.split(".")
    if not 1 <= len(parts) <= 4 or not all(_number(p) is not None for p in parts):
        return None
    values = [_number(p) or 0 for p in parts]
    if any(v > 0xFF for v in values[:-1]) or values[-1] > _V4_PART_MAX[len(values) - 1]:
        raise Refused(f"{host!r} is not an address: a part is too large.")
    whole = 0
    for v in values[:-1]:
        whole = whole << 8 | v
    whole = whole << 8 * (5 - len(values)) | values[-1]
    return ipaddress.IPv4Address(whole)


def _number(part: str) -> int | None:
    """A part of a dotted IPv4 address as inet_aton reads it: 0x.. hex, 0.. octal, else decimal."""
    try:
        if part[:2].lower() == "0x":
            return int(part[2:] or "0", 16)
        if len(part) > 1 and part.startswith("0"):
            return int(part[1:], 8)
        return int(part, 10) if part.isdigit() else None
    except ValueError:
        return None


def carried(address: Address) -> Address | None:
    """The IPv4 address an IPv6 address carries (mapped, compatible, 6to4, NAT64, Teredo's client); None."""
    if not isinstance(address, ipaddress.IPv6Address):
        return None
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address.sixtofour is not None:
        return address.sixtofour
    if address.teredo is not None:
        return address.teredo[1]
    packed = address.packed
    if any(address in net for net in _NAT64) or (packed[:12] == bytes(12) and packed[12:] != bytes(4)):
        return ipaddress.IPv4Address(packed[12:])  # NAT64, or the deprecated IPv4-compatible ::a.b.c.d
    return None


def kind(address: Address) -> str:
    """What sort of address it is, in words ("loopback", "link-local", ...): "public" for one on the internet.
    An IPv6 address that carries an IPv4 address is of the IPv4 address's sort where that is not public."""
    inner = carried(address)
    if inner is not None and kind(inner) != "public":
        return kind(inner)
    if address == _BROADCAST:
        return "broadcast"
    for attribute, words in (
        ("is_unspecified", "unspecified"),
        ("is_loopback", "loopback"),
        ("is_link_local", "link-local"),
        ("is_multicast", "multicast"),
        ("is_private", "private"),
        ("is_reserved", "reserved"),
    ):
        if getattr(address, attribute):
            return words
    return "public" if address.is_global else "reserved"


def allowed(address: Address, within: Iterable[Network], public: bool) -> str:
    """Why the address may not be reached ("" when it may): in a listed network, or public where `public`;
    never unspecified, broadcast or multicast."""
    inner = carried(address)
    what = kind(address)
    shown = f"{address} (carrying {inner})" if inner is not None else str(address)
    if what in ("unspecified", "multicast", "broadcast"):
        return f"{shown} is {what}: never a place to connect to."
    if any(address in net or (inner is not None and inner in net) for net in within):
        return ""
    if public and what == "public":
        return ""
    if what == "link-local":
        what = "link-local (a cloud's metadata service lives there)"
    return f"{shown} is a {what} address, on no network IT allows for this."


Resolver = Callable[[str, int], list[Address]]


def resolve(host: str, port: int) -> list[Address]:
    """Every address a name resolves to (TCP); Refused when it resolves to none."""
    try:
        found = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError) as error:
        raise Refused(f"{host} does not resolve ({getattr(error, 'strerror', None) or error}).") from None
    addresses: list[Address] = []
    for _family, _type, _proto, _name, where in found:
        address = ipaddress.ip_address(str(where[0]).split("%", 1)[0])
        if address not in addresses:
            addresses.append(address)
    if not addresses:
        raise Refused(f"{host} resolves to no address.")
    return addresses


def check(host: str, port: int, within: Iterable[Network], public: bool, resolver: Resolver = resolve) -> Checked:
    """The address to connect to for host:port, every address of the host having passed `allowed`;
    Refused otherwise."""
    if not host or any(c.isspace() or c in "/\\@?#\x00" for c in host):
        raise Refused("Give a host name or an IP address.")
    listed = list(within)
    address = literal(host)
    addresses = [address] if address is not None else resolver(host.rstrip("."), port)
    for each in addresses:
        problem = allowed(each, listed, public)
        if problem:
            named = "" if address is not None else f"{host} resolves to {each}: "
            raise Refused(named + problem if named else problem)
    return Checked(host.rstrip(".").strip("[]").lower(), addresses[0], port)


def check_url(url: str, within: Iterable[Network], public: bool, resolver: Resolver = resolve) -> Checked:
    """`check` for an http(s) URL's host and port."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise Refused("Give an http or https URL.")
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        raise Refused("The URL's port is not a number from 1 to 65535.") from None
    return check(parts.hostname, port, within, public, resolver)


def post(url: str, body: bytes, headers: Mapping[str, str], timeout: float, to: Checked) -> tuple[int, str]:
    """POST to `url` over a connection to `to.address` (checked), never the name again; TLS still verifies
    the certificate for the URL's name. Returns the status and its reason; a redirect is a status like any other (never
    followed). OSError or http.client.HTTPException when the server cannot be reached or speaks no HTTP."""
    parts = urlsplit(url)
    connection: http.client.HTTPConnection
    if parts.scheme == "https":
        tls = ssl.create_default_context()
        connection = http.client.HTTPSConnection(to.host, to.port, timeout=timeout, context=tls)
    else:
        connection = http.client.HTTPConnection(to.host, to.port, timeout=timeout)
    pinned = str(to.address)

    def connect(where: tuple[str, int], *args: Any, **kwargs: Any) -> socket.socket:
        return socket.create_connection((pinned, where[1]), *args, **kwargs)

    connection._create_connection = connect  # type: ignore[attr-defined]  # http.client's seam for the socket
    try:
        path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        connection.request("POST", path, body=body, headers=dict(headers))
        answer = connection.getresponse()
        answer.read(65536)
        return answer.status, answer.reason
    finally:
        connection.close()
