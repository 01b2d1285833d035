"""`gridlane submit --code DIR`: the directory as a deterministic .tar.gz, named by its sha256.

The same tree always makes the same bytes (entries sorted, times, owners and gzip header zeroed, modes
reduced to 644/755), so a second submit of an unchanged tree finds the portal has it and uploads nothing.
What .gitignore files ignore stays behind (gridlane_cli.gitignore), and so does .git; a symbolic link travels
only when it points inside the directory (a job's node cannot follow one out of it).
"""

from __future__ import annotations

import gzip
import hashlib
import os
import posixpath
import stat
import sys
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from gridlane_cli import gitignore


@dataclass
class Bundle:
    file: IO[bytes]  # the .tar.gz, at its start
    digest: str  # sha256, hex
    size: int  # bytes of the .tar.gz
    unpacked: int  # bytes of its files
    files: list[str]


def walk(root: Path, warn: IO[str] | None = None) -> list[tuple[str, os.stat_result]]:
    """(path relative to root, lstat) of every folder, file and inside link that travels, in sorted order."""
    found: list[tuple[str, os.stat_result]] = []
    rules: list[gitignore.Rule] = []

    def visit(folder: Path, rel: str, rules: list[gitignore.Rule]) -> None:
        ignore_file = folder / ".gitignore"
        if ignore_file.is_file():
            rules = rules + gitignore.parse(ignore_file.read_text(encoding="utf-8", errors="replace"), rel)
        for name in sorted(os.listdir(folder)):
            path = f"{rel}/{name}" if rel else name
            full = folder / name
            info = full.lstat()
            is_dir = stat.S_ISDIR(info.st_mode)
            if name == ".git" or gitignore.ignored(rules, path, is_dir):
                continue
            if stat.S_ISLNK(info.st_mode):
                target = os.readlink(full)
                inside = posixpath.normpath(posixpath.join(posixpath.dirname(path), target))
                if target.startswith("/") or inside == ".." or inside.startswith("../"):
                    print(f"gridlane: {path} links outside {root} ({target}); it stays behind", file=warn or sys.stderr)
                    continue
                found.append((path, info))
            elif is_dir:
                found.append((path, info))
                visit(full, path, rules)
            elif stat.S_ISREG(info.st_mode):
                found.append((path, info))

    visit(root, "", rules)
    return found


def pack(directory: str | Path, warn: IO[str] | None = None) -> Bundle:
    """The directory's bundle; OSError when it cannot be read."""
    root = Path(directory).resolve()
    if not root.is_dir():
        raise NotADirectoryError(f"{directory} is not a directory")
    out = tempfile.TemporaryFile()  # noqa: SIM115 (handed to the caller, who reads and closes it)
    unpacked, names = 0, []
    # mtime=0 and no file name: the gzip header holds nothing that changes between two packs of one tree.
    with (
        gzip.GzipFile(fileobj=out, mode="wb", mtime=0, filename="", compresslevel=6) as gz,
        tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar,
    ):
        for rel, info in walk(root, warn):
            entry = tarfile.TarInfo(rel)
            entry.mtime, entry.uid, entry.gid, entry.uname, entry.gname = 0, 0, 0, "", ""
            if stat.S_ISLNK(info.st_mode):
                entry.type, entry.linkname, entry.mode = tarfile.SYMTYPE, os.readlink(root / rel), 0o777
                tar.addfile(entry)
            elif stat.S_ISDIR(info.st_mode):
                entry.type, entry.mode = tarfile.DIRTYPE, 0o755
                tar.addfile(entry)
            else:
                entry.mode = 0o755 if info.st_mode & stat.S_IXUSR else 0o644
                with open(root / rel, "rb") as f:
                    entry.size = os.fstat(f.fileno()).st_size
                    tar.addfile(entry, f)
                unpacked += entry.size
                names.append(rel)
    digest, size = hashlib.sha256(), out.tell()
    out.seek(0)
    for block in iter(lambda: out.read(1 << 20), b""):
        digest.update(block)
    out.seek(0)
    return Bundle(out, digest.hexdigest(), size, unpacked, names)
