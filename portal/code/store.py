"""Bundles on disk: GRIDLANE_CODE_DIR/<first two hex digits>/<sha256>.tar.gz, each written whole or not at all.

An upload streams into a temporary file in the same folder while its sha256 is computed and its size counted
(never more than the cap is read), is checked as an archive a node may unpack (fabrics.travel.node: relative
paths, no links out, at most the cap once unpacked), and only then renamed into place. The name is the digest of
the bytes, so a file in place is always the right one, whoever wrote it.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import tarfile
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO

from django.conf import settings

from fabrics.travel import node

CHUNK = 1 << 20


class TooLarge(Exception):
    """More than the cap: the message says the cap."""


class Unfit(Exception):
    """Not the bytes named, or not an archive a node may unpack: the message says why."""


def cap() -> int:
    """The most bytes a bundle may hold, packed or unpacked (IT's GRIDLANE_CODE_MAX_MB)."""
    return int(settings.GRIDLANE_CODE_MAX_MB * 1024 * 1024)


def root() -> Path:
    return Path(settings.GRIDLANE_CODE_DIR)


def path_of(digest: str) -> Path:
    return root() / digest[:2] / f"{digest}.tar.gz"


def cap_words() -> str:
    return f"{settings.GRIDLANE_CODE_MAX_MB:g} MB"


@contextlib.contextmanager
def received(stream: IO[bytes], digest: str, declared: int | None) -> Iterator[tuple[Path, int, int]]:
    """The upload in a temporary file, checked: (its path, its size, its unpacked size). TooLarge or Unfit when
    it may not be kept; the temporary file is gone when the block ends, unless `keep` moved it into place."""
    limit = cap()
    if declared is not None and declared > limit:
        raise TooLarge(f"The bundle is larger than this site's limit of {cap_words()}.")
    folder = path_of(digest).parent
    folder.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(dir=folder, prefix=".upload-")
    tmp = Path(name)
    try:
        hashing, size = hashlib.sha256(), 0
        with os.fdopen(fd, "wb") as out:
            while block := stream.read(min(CHUNK, limit + 1 - size)):
                size += len(block)
                if size > limit:
                    raise TooLarge(f"The bundle is larger than this site's limit of {cap_words()}.")
                hashing.update(block)
                out.write(block)
            out.flush()
            os.fsync(out.fileno())
        if hashing.hexdigest() != digest:
            raise Unfit(f"The bytes sent have sha256 {hashing.hexdigest()}, not {digest}.")
        yield tmp, size, unpacked_size(tmp, limit)
    finally:
        tmp.unlink(missing_ok=True)


def unpacked_size(path: Path, limit: int) -> int:
    """The bytes of its files; Unfit when it is no .tar.gz, holds a member a node would refuse, or unpacks past
    the limit (then TooLarge)."""
    try:
        with tarfile.open(path, "r:gz") as archive:
            members = node.check_members(archive, max_bytes=limit)
    except node.Refused as refused:
        if "unpacks to more than" in str(refused):
            raise TooLarge(f"The bundle unpacks to more than this site's limit of {cap_words()}.") from None
        raise Unfit(f"The bundle cannot be unpacked safely: {refused}.") from None
    except (tarfile.TarError, EOFError, OSError) as error:
        raise Unfit(f"The bundle is not a .tar.gz archive: {error}.") from None
    return sum(m.size for m in members if m.isfile())


def keep(tmp: Path, digest: str) -> None:
    """Move a received upload into place (atomically: a reader sees the whole file or none)."""
    os.replace(tmp, path_of(digest))
