"""The job server's secret taken out of everything the connect proxy sends back: every header value (whatever
the answer's type: Location, Refresh and Set-Cookie included, and percent-encoded copies), every body of
every type, and WebSocket messages. Rules:

- A body comes to the browser uncompressed: a gzip, deflate or br body is decompressed as it streams, the
  secret taken out, and sent as identity (the proxy asks the server for identity; one that compresses
  anyway is still read). A body in any other coding cannot be read here, so it is not passed on
  (`Unreadable`: the proxy answers 502).
- One chunk from the server expands to at most INFLATE_MAX bytes: a body that would expand further (a
  decompression bomb) is Unreadable, so one answer never holds more than that in the proxy's memory.
- A copy of the secret split across two chunks is found too: only a chunk's end that could begin the
  secret waits for the next chunk, so a stream of events is not held back.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from urllib.parse import unquote

try:  # br is the one coding outside the standard library; without the package, a br body is Unreadable
    import brotli  # type: ignore[import-untyped]  # no type information shipped
except ImportError:  # pragma: no cover (installed with the project)
    brotli = None

INFLATE_MAX = 64 * 1024 * 1024  # bytes one chunk of a compressed body may expand to
READABLE = ("identity", "gzip", "x-gzip", "deflate") + (("br",) if brotli is not None else ())


class Unreadable(Exception):
    """The body is in a coding the proxy cannot read, so it cannot be checked for the secret."""


def header(value: str, secret: str) -> str:
    """The value without the secret, plain or percent-encoded (a redirect's query, a cookie's value)."""
    if not secret:
        return value
    value = value.replace(secret, "")
    if "%" in value and secret in unquote(value):
        value = unquote(value).replace(secret, "")
    return value


def codings(content_encoding: str) -> list[str]:
    """The codings of a Content-Encoding header, in the order they were applied; Unreadable for one the proxy
    cannot undo."""
    found = [c.strip().lower() for c in content_encoding.split(",") if c.strip()]
    for coding in found:
        if coding not in READABLE:
            raise Unreadable(f"the server's answer is in the {coding!r} coding, which the portal cannot check")
    return [c for c in found if c != "identity"]


def _decoder(coding: str) -> Callable[[bytes], bytes]:
    if coding in ("gzip", "x-gzip"):
        return _Zlib(47).feed  # gzip or zlib header, found from the data
    if coding == "deflate":
        return _Zlib(0).feed
    if brotli is None:  # codings() lets only a readable coding through
        raise Unreadable("the br coding cannot be read here")
    inner = brotli.Decompressor()

    def feed(data: bytes) -> bytes:
        out: bytes = inner.process(data, output_buffer_limit=INFLATE_MAX)
        if len(out) > INFLATE_MAX or not inner.can_accept_more_data():
            raise Unreadable(f"the server's compressed answer expands past {INFLATE_MAX} bytes a chunk")
        return out

    return feed


class _Zlib:
    """gzip (`wbits` 47), or HTTP's deflate (`wbits` 0): zlib-wrapped as the RFC says, or raw as some servers
    send it, told apart by its first two bytes. Each chunk expands to at most INFLATE_MAX bytes."""

    def __init__(self, wbits: int) -> None:
        self._wbits = wbits
        self._inner: zlib._Decompress | None = zlib.decompressobj(wbits=wbits) if wbits else None
        self._held = b""

    def feed(self, data: bytes) -> bytes:
        if self._inner is None:
            self._held += data
            if len(self._held) < 2:
                return b""
            wrapped = (self._held[0] & 0x0F) == 8 and int.from_bytes(self._held[:2], "big") % 31 == 0
            self._inner = zlib.decompressobj(wbits=15 if wrapped else -15)
            data, self._held = self._held, b""
        out = self._inner.decompress(data, INFLATE_MAX)
        if self._inner.unconsumed_tail:
            raise Unreadable(f"the server's compressed answer expands past {INFLATE_MAX} bytes a chunk")
        return out


class Body:
    """A body's chunks in, the same body out decoded and without the secret (`feed`, then `end`)."""

    def __init__(self, secret: bytes, content_encoding: str = "") -> None:
        self.secret = secret
        self._decoders = [_decoder(c) for c in reversed(codings(content_encoding))]
        self._carry = b""

    def feed(self, chunk: bytes) -> bytes:
        try:
            for decode in self._decoders:
                chunk = decode(chunk)
        except Unreadable:
            raise
        except Exception as error:  # zlib.error, brotli.error: a body that is not what its coding says
            raise Unreadable(f"the server's compressed answer could not be read: {error}") from None
        if not self.secret:
            return chunk
        data = (self._carry + chunk).replace(self.secret, b"")
        held = _partial(data, self.secret)
        self._carry = data[len(data) - held :]
        return data[: len(data) - held]

    def end(self) -> bytes:
        carry, self._carry = self._carry, b""
        return carry


def _partial(data: bytes, secret: bytes) -> int:
    """How many bytes at the end of `data` are the start of `secret` (0 when none)."""
    for size in range(min(len(data), len(secret) - 1), 0, -1):
        if data.endswith(secret[:size]):
            return size
    return 0


def message(data: str | bytes, secret: str) -> str | bytes:
    """A WebSocket message without the secret."""
    if not secret:
        return data
    if isinstance(data, str):
        return data.replace(secret, "")
    return data.replace(secret.encode(), b"")
