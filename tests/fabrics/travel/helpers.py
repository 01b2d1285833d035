"""What travel tests build: a tiny wheel (so packages install without a network) and archives of any shape."""

from __future__ import annotations

import base64
import hashlib
import io
import tarfile
import zipfile
from pathlib import Path


def tiny_wheel(folder: Path, name: str = "tinypkg", value: str = "42") -> Path:
    """A pure-Python wheel of one module, `name`, whose VALUE is `value`: pip installs it from the file alone."""
    files = {
        f"{name}/__init__.py": f"VALUE = {value}\n",
        f"{name}-1.0.dist-info/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n",
        f"{name}-1.0.dist-info/WHEEL": (
            "Wheel-Version: 1.0\nGenerator: tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        ),
    }
    record = []
    for path, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
        record.append(f"{path},sha256={digest},{len(text.encode())}")
    record.append(f"{name}-1.0.dist-info/RECORD,,")
    folder.mkdir(parents=True, exist_ok=True)
    wheel = folder / f"{name}-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        for path, text in files.items():
            z.writestr(path, text)
        z.writestr(f"{name}-1.0.dist-info/RECORD", "\n".join(record) + "\n")
    return wheel


def archive(members: list[tuple[str, str, str]], mode: int = 0o644) -> bytes:
    """A .tar.gz of (name, kind, content-or-link-target) members: kind is file, dir, symlink, hardlink or fifo;
    each with `mode` (tarfile's default: 0o644, a folder no one but root may enter)."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:gz") as tar:
        for name, kind, value in members:
            info = tarfile.TarInfo(name)
            info.mode = mode
            data = value.encode()
            if kind == "file":
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
                continue
            info.type = {"dir": tarfile.DIRTYPE, "symlink": tarfile.SYMTYPE, "hardlink": tarfile.LNKTYPE,
                         "fifo": tarfile.FIFOTYPE}[kind]  # fmt: skip
            info.linkname = value
            tar.addfile(info)
    return out.getvalue()
