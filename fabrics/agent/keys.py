"""A lease's SSH access: one line per lease in an authorized_keys file, the person's own or a shared one.

A lease that names the person's POSIX user (the portal's identity mapping) goes to that account's own
~/.ssh/authorized_keys, the account made on first use where the agent is allowed to (`person_account`);
a lease without one goes to the lease account's file the agent was given, as before.

Each line carries `expiry-time=` (OpenSSH refuses the key afterwards even if the agent is gone) and,
when configured, `from=`; a marker comment names the lease so that its removal takes only its line.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import re
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
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


# --- A person's own account on the host -------------------------------------------------------------

PERSON = re.compile(r"[a-z_][a-z0-9_-]{0,31}")  # a portable POSIX user name, as the portal's mapping makes


class AccountError(Exception):
    """The person's account cannot take the lease: the reason, for the lease's failure."""


def person_account(user: str, *, create: bool, min_uid: int) -> pwd.struct_passwd:
    """The host account a lease of `user` logs in to: theirs, made on first use when `create` (no password,
    key login only), never root or a system account (uid below `min_uid`)."""
    if not PERSON.fullmatch(user) or user == "root":
        raise AccountError(f"{user!r} is not a user name a lease may use")
    try:
        entry = pwd.getpwnam(user)
    except KeyError:
        if not create:
            raise AccountError(f"there is no account {user} on this host") from None
        made = subprocess.run(
            ["useradd", "--create-home", "--shell", "/bin/bash", "--password", "*", "--", user],
            capture_output=True,
            text=True,
            timeout=60,
        )
        if made.returncode != 0:
            raise AccountError(f"could not make the account {user}: {made.stderr.strip()[:200]}") from None
        entry = pwd.getpwnam(user)
    if entry.pw_uid < min_uid:
        raise AccountError(f"{user} has uid {entry.pw_uid}, below {min_uid}: a system account takes no lease")
    return entry


def person_grant(
    entry: pwd.struct_passwd, public_key: str, run_id: str, ends_at: datetime, from_addresses: str = ""
) -> None:
    """Add (or replace) the lease's line in the person's own ~/.ssh/authorized_keys, owned by them."""
    with _ssh_dir(entry) as dir_fd:
        kept = [e for e in _read_at(dir_fd) if not e.endswith(f"{MARK}{run_id}")]
        _write_at(dir_fd, entry, [*kept, line(public_key, run_id, ends_at, from_addresses)])


def person_revoke(entry: pwd.struct_passwd, run_id: str) -> None:
    with _ssh_dir(entry) as dir_fd:
        _write_at(dir_fd, entry, [e for e in _read_at(dir_fd) if not e.endswith(f"{MARK}{run_id}")])


@contextmanager
def _ssh_dir(entry: pwd.struct_passwd) -> Iterator[int]:
    """The person's ~/.ssh, opened without following links (the person owns their home and could point
    .ssh anywhere; the agent may run as root), made 0700 and theirs when missing."""
    home = os.open(entry.pw_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:
        try:
            os.mkdir(".ssh", 0o700, dir_fd=home)
            os.chown(".ssh", entry.pw_uid, entry.pw_gid, dir_fd=home, follow_symlinks=False)
        except FileExistsError:
            pass
        fd = os.open(".ssh", os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=home)
    finally:
        os.close(home)
    try:
        yield fd
    finally:
        os.close(fd)


def _read_at(dir_fd: int) -> list[str]:
    try:
        fd = os.open("authorized_keys", os.O_RDONLY | os.O_NOFOLLOW, dir_fd=dir_fd)
    except FileNotFoundError:
        return []
    with os.fdopen(fd) as f:
        return [entry for entry in f.read().splitlines() if entry.strip()]


def _write_at(dir_fd: int, entry: pwd.struct_passwd, entries: list[str]) -> None:
    tmp = f".authorized_keys.{os.getpid()}.tmp"
    with contextlib.suppress(FileNotFoundError):
        os.unlink(tmp, dir_fd=dir_fd)
    fd = os.open(tmp, os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_NOFOLLOW, 0o600, dir_fd=dir_fd)
    with os.fdopen(fd, "w") as f:
        os.fchown(f.fileno(), entry.pw_uid, entry.pw_gid)
        f.write("".join(e + "\n" for e in entries))
    os.replace(tmp, "authorized_keys", src_dir_fd=dir_fd, dst_dir_fd=dir_fd)  # sshd never reads half a file
