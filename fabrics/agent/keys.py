"""A lease's SSH access: one line per lease in the lease account's authorized_keys.

Each line carries `expiry-time=` (OpenSSH refuses the key afterwards even if the agent is gone) and,
when configured, `from=`; a marker comment names the lease so that its removal takes only its line.
"""

from __future__ import annotations

import os
from datetime import datetime
from pathlib import Path

MARK = "gridlane-lease-"


def line(public_key: str, run_id: str, ends_at: datetime, from_addresses: str = "") -> str:
    # expiry-time wants local-free "YYYYMMDDHHMM[SS]Z" in UTC.
    options = [f'expiry-time="{ends_at.strftime("%Y%m%d%H%M%SZ")}"']
    if from_addresses:
        options.append(f'from="{from_addresses}"')
    key_type, key_body = public_key.split()[:2]
    return f"{','.join(options)} {key_type} {key_body} {MARK}{run_id}"


def grant(path: Path, public_key: str, run_id: str, ends_at: datetime, from_addresses: str = "") -> None:
    """Add (or replace) the lease's line."""
    kept = [entry for entry in _read(path) if not entry.endswith(f"{MARK}{run_id}")]
    _write(path, [*kept, line(public_key, run_id, ends_at, from_addresses)])


def revoke(path: Path, run_id: str) -> None:
    kept = [entry for entry in _read(path) if not entry.endswith(f"{MARK}{run_id}")]
    _write(path, kept)


def _read(path: Path) -> list[str]:
    try:
        return [entry for entry in path.read_text().splitlines() if entry.strip()]
    except FileNotFoundError:
        return []


def _write(path: Path, entries: list[str]) -> None:
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_CREAT | os.O_TRUNC | os.O_WRONLY, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write("".join(e + "\n" for e in entries))
    os.replace(tmp, path)  # sshd never reads half a file
