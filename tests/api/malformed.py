"""Request bodies no client should send, each with the status the API must answer (never a 5xx, never HTML)."""

from __future__ import annotations

MIB = 1024 * 1024
JSON = "application/json"

# (what it is, body bytes, content type, status). The first few are JSON an endpoint that reads none of the
# fields may take; every endpoint answers the rest (not JSON, too deep, too large, not text) with the status.
BODIES: list[tuple[str, bytes, str, int]] = [
    ("a list, not an object", b"[1, 2, 3]", JSON, 400),
    ("a bare string", b'"train"', JSON, 400),
    ("a bare number", b"42", JSON, 400),
    ("null", b"null", JSON, 400),
    (
        "fields of the wrong types",
        b'{"queue": 5, "kind": [], "name": {"a": 1}, "command": false, '
        b'"resources": "lots", "runtime_limit_minutes": "soon", "priority": 3.5, "state": {"x": [1]}, '
        b'"host": ["a"], "queues": "gpu-a", "wait": "never", "exit_code": "zero", "chunk": 7, "samples": {"a": 1}, '
        b'"public_key": 12, "lease_hours": [], "lease_ends_at": 5}',
        JSON,
        400,
    ),
    (
        "numbers too big for any column",
        b'{"resources": {"gpus": 1e308, "cpus": 99999999999999999999999999999}, '
        b'"runtime_limit_minutes": 99999999999999999999999, "exit_code": 99999999999999999999999, '
        b'"samples": [{"gpus_milli": 99999999999999999999999, "at": "2026-01-01T00:00:00Z"}]}',
        JSON,
        400,
    ),
    # Not JSON, or JSON that cannot be kept: refused by every endpoint, whatever it reads.
    ("a number past a float's range", b'{"resources": {"gpus": 1e400}, "exit_code": 1e400, "wait": -1e999}', JSON, 400),
    ("NaN and Infinity", b'{"resources": {"gpus": NaN, "cpus": Infinity}, "wait": -Infinity}', JSON, 400),
    ("nested 100,000 deep", b"[" * 100_000 + b"]" * 100_000, JSON, 400),
    ("an object nested 40 deep", b'{"a": ' * 40 + b"1" + b"}" * 40, JSON, 400),
    ("cut short", b'{"queue": "train", "resources": {"gpus": ', JSON, 400),
    ("not UTF-8", b'{"name": "caf\xe9", "host": "\xff\xfe"}', JSON, 400),
    ("UTF-16 with a byte order mark", '{"name": "x"}'.encode("utf-16"), JSON, 400),
    ("a charset that does not exist", b'{"name": "x"}', f"{JSON}; charset=klingon", 400),
    ("a lone surrogate", b'{"name": "\\ud800", "host": "\\udfff", "command": "\\ud800"}', JSON, 400),
    ("a NUL character", b'{"name": "a\\u0000b", "host": "h\\u0000", "command": "\\u0000"}', JSON, 400),
    ("2 MiB of JSON", b'{"command": "' + b"x" * (2 * MIB) + b'"}', JSON, 413),
    ("2 MiB of form", b"command=" + b"x" * (2 * MIB), "application/x-www-form-urlencoded", 413),
    ("a broken multipart body", b"--nope\r\nContent-Disposition: form-data\r\n\r\n", "multipart/form-data", 400),
]

PARSED = 6  # BODIES[:PARSED] parse; what they mean is for each endpoint to say
