"""Run on the node before the job's command: the workload's code and packages, made ready in its working directory.

The standard library only, and nothing of Gridlane's: wrappers ship this file's text and run it with the node's
python3 (`python3 -c "$text"`, fabrics.travel), in the directory the job will run in. It reads the job's
environment and prints the virtual environment's path (an empty line when there is none) on stdout; progress
and errors go to stderr, which is the job's log. Exit status 90 says the code or packages could not be made
ready, with a line saying why.

- GRIDLANE_CODE_DIGEST and GRIDLANE_CODE_URL: a bundle the user uploaded, fetched from the portal with the
  workload's own secret (GRIDLANE_ENDPOINT_SECRET, as its GPU sampler posts), its sha256 checked, cached on the
  node by digest, and unpacked here refusing absolute paths, `..` and links that lead out.
- GRIDLANE_CODE_GIT and GRIDLANE_CODE_COMMIT: `git clone` and `git archive <commit>`, cached by commit, and
  unpacked the same way (only https and ssh unless the node's GIT_ALLOW_PROTOCOL says otherwise).
- GRIDLANE_REQUIREMENTS: a requirements file's text. A virtual environment is built once per node for each
  requirements text and Python (uv where it is on PATH, else venv and pip), under a lock, so two jobs that
  start together build it once; a failed build leaves nothing behind.

The cache is GRIDLANE_CACHE, else $XDG_CACHE_HOME/gridlane, else ~/.cache/gridlane.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import posixpath
import shutil
import subprocess
import sys
import tarfile
import tempfile
import urllib.request
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import IO

CODE_URL_ENV = "GRIDLANE_CODE_URL"
CODE_DIGEST_ENV = "GRIDLANE_CODE_DIGEST"
GIT_URL_ENV = "GRIDLANE_CODE_GIT"
GIT_COMMIT_ENV = "GRIDLANE_CODE_COMMIT"
REQUIREMENTS_ENV = "GRIDLANE_REQUIREMENTS"
SECRET_ENV = "GRIDLANE_ENDPOINT_SECRET"  # noqa: S105 (a name: the workload's own secret)
CACHE_ENV = "GRIDLANE_CACHE"
READY = ".gridlane-ready"  # written last into a finished virtual environment
FAILED = 90  # the exit status when the code or packages cannot be made ready
CHUNK = 1 << 20


class Refused(Exception):
    """The code or its packages cannot be made ready; the message says why, for the job's log."""


def cache_root(env: Mapping[str, str]) -> Path:
    if env.get(CACHE_ENV):
        return Path(env[CACHE_ENV])
    base = env.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "gridlane"


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    """Hold an exclusive lock on `path` (made if missing): one job of the node builds, the others wait for it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(CHUNK), b""):
            digest.update(block)
    return digest.hexdigest()


# -- bundles ----------------------------------------------------------------------------------------


def fetch_bundle(url: str, secret: str, digest: str, cache: Path) -> Path:
    """The bundle with this sha256, from the node's cache or else the portal; Refused when what came is not it."""
    folder = cache / "code"
    target = folder / f"{digest}.tar.gz"
    if target.is_file() and sha256_of(target) == digest:
        return target
    with locked(folder / f"{digest}.lock"):
        if target.is_file() and sha256_of(target) == digest:
            return target  # another job fetched it while this one waited
        request = urllib.request.Request(url, headers={"Authorization": f"Bearer {secret}"})  # noqa: S310
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=".fetch-")
        hashing = hashlib.sha256()
        try:
            with os.fdopen(fd, "wb") as out, urllib.request.urlopen(request, timeout=60) as answer:  # noqa: S310
                for block in iter(lambda: answer.read(CHUNK), b""):
                    hashing.update(block)
                    out.write(block)
            if hashing.hexdigest() != digest:
                raise Refused(f"the code bundle fetched has sha256 {hashing.hexdigest()}, not {digest}: refused")
            os.replace(tmp, target)
        except OSError as error:
            raise Refused(f"cannot fetch the code bundle from {url}: {error}") from None
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
    return target


def check_members(archive: tarfile.TarFile, max_bytes: int | None = None) -> list[tarfile.TarInfo]:
    """The archive's members when every one stays inside the directory it is unpacked into: a relative path
    without `..` that passes through no link, a file, a directory or a link whose target stays inside too.
    Refused naming the first that does not, or when the files add up to more than max_bytes."""
    members, total, links = [], 0, set()
    for member in archive:
        name = member.name
        parts = name.rstrip("/").split("/")
        if name.startswith("/") or "\\" in name or ".." in parts or "\x00" in name or not name.strip("/."):
            raise Refused(f"{name!r} in the bundle would land outside its directory")
        if any("/".join(parts[: i + 1]) in links for i in range(len(parts) - 1)):
            raise Refused(f"{name!r} in the bundle passes through a link")
        if member.issym() or member.islnk():
            link = member.linkname
            inside = posixpath.normpath(posixpath.join(posixpath.dirname(name), link) if member.issym() else link)
            if link.startswith("/") or inside == ".." or inside.startswith("../"):
                raise Refused(f"{name!r} in the bundle links outside its directory ({link})")
            links.add("/".join(parts))
        elif not (member.isfile() or member.isdir()):
            raise Refused(f"{name!r} in the bundle is neither a file, a directory nor a link")
        if member.isdir():  # the job's user enters every folder and reads every file, whatever the archive says
            member.mode = 0o755
        elif member.isfile():
            member.mode = 0o755 if member.mode & 0o100 else 0o644
        total += member.size if member.isfile() else 0
        if max_bytes is not None and total > max_bytes:
            raise Refused(f"the bundle unpacks to more than {max_bytes // (1024 * 1024)} MiB")
        members.append(member)
    return members


def extract(path: Path, dest: Path) -> None:
    """Unpack a .tar or .tar.gz into dest once every member is checked (check_members; tarfile's data filter,
    where this Python has it, checks the same again)."""
    try:
        with tarfile.open(path) as archive:
            members = check_members(archive)
            if hasattr(tarfile, "data_filter"):
                archive.extractall(dest, members=members, filter="data")
            else:  # an older Python: the checks above are the guard
                archive.extractall(dest, members=members)  # noqa: S202 (every member checked above)
    except (tarfile.TarError, EOFError) as error:
        raise Refused(f"the code bundle is not a readable tar archive: {error}") from None


# -- git --------------------------------------------------------------------------------------------


def git_archive(url: str, commit: str, cache: Path, env: Mapping[str, str]) -> Path:
    """A tar of the repository's tree at the commit (no .git), cached by commit; Refused when git cannot get it."""
    folder = cache / "git"
    target = folder / f"{commit}.tar"
    if target.is_file():
        return target
    git = shutil.which("git", path=env.get("PATH"))
    if git is None:
        raise Refused("the code is a git repository, and this node has no git")
    run_env = {**env, "GIT_TERMINAL_PROMPT": "0"}
    run_env.setdefault("GIT_ALLOW_PROTOCOL", "https:ssh")  # never ext:: or a file on the node
    with locked(folder / f"{commit}.lock"):
        if target.is_file():
            return target
        work = Path(tempfile.mkdtemp(dir=folder, prefix=".clone-"))
        try:
            _git(git, ["clone", "--quiet", "--no-checkout", "--", url, str(work / "repo")], run_env)
            _git(git, ["-C", str(work / "repo"), "cat-file", "-e", f"{commit}^{{commit}}"], run_env,
                 f"the repository has no commit {commit}")  # fmt: skip
            _git(git, ["-C", str(work / "repo"), "archive", "--format=tar", "-o", str(work / "tree.tar"), commit],
                 run_env)  # fmt: skip
            os.replace(work / "tree.tar", target)
        finally:
            shutil.rmtree(work, ignore_errors=True)
    return target


def _git(git: str, args: list[str], env: Mapping[str, str], refusal: str = "") -> None:
    done = subprocess.run([git, *args], env=dict(env), stdin=subprocess.DEVNULL, capture_output=True, text=True)
    if done.returncode != 0:
        raise Refused(refusal or f"git {args[0] if args[0] != '-C' else args[2]} failed: {done.stderr.strip()[-500:]}")


# -- packages ---------------------------------------------------------------------------------------


def venv_key(requirements: str, python: str) -> str:
    """The cache key of a virtual environment: its requirements' text and the Python it is built on."""
    version = subprocess.run(
        [python, "-c", "import sys; print(sys.implementation.cache_tag, sys.platform)"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    return hashlib.sha256(f"{version}\n{requirements}".encode()).hexdigest()[:32]


def build_venv(requirements: str, cache: Path, env: Mapping[str, str], python: str = sys.executable) -> Path:
    """The virtual environment for these requirements on this node, built under a lock if it is not yet."""
    folder = cache / "venv"
    target = folder / venv_key(requirements, python)
    if (target / READY).is_file():
        return target
    with locked(folder / f"{target.name}.lock"):
        if (target / READY).is_file():
            return target  # another job built it while this one waited
        shutil.rmtree(target, ignore_errors=True)  # what a build that died left
        wanted = target / "requirements.txt"
        run_env = {**env, "PIP_DISABLE_PIP_VERSION_CHECK": "1", "VIRTUAL_ENV": str(target)}
        uv = shutil.which("uv", path=env.get("PATH"))
        try:
            if uv is not None:
                _step([uv, "venv", "--quiet", "--python", python, str(target)], run_env)
                wanted.write_text(requirements)
                _step([uv, "pip", "install", "--quiet", "--python", str(target / "bin" / "python"), "-r", str(wanted)],
                      run_env)  # fmt: skip
            else:
                _step([python, "-m", "venv", str(target)], run_env)
                wanted.write_text(requirements)
                _step([str(target / "bin" / "python"), "-m", "pip", "install", "--quiet", "-r", str(wanted)], run_env)
        except BaseException:
            shutil.rmtree(target, ignore_errors=True)
            raise
        (target / READY).write_text("")
    return target


def _step(argv: list[str], env: Mapping[str, str]) -> None:
    print(f"gridlane: {' '.join(argv[:3])} ...", file=sys.stderr, flush=True)
    # Its output goes where ours does (fd 2): the job's log.
    done = subprocess.run(argv, env=dict(env), stdin=subprocess.DEVNULL, stdout=2)
    if done.returncode != 0:
        raise Refused(f"building the job's packages failed ({argv[0]} {argv[1]} exited {done.returncode})")


# -- the whole ---------------------------------------------------------------------------------------


def prepare(dest: Path, env: Mapping[str, str]) -> Path | None:
    """Unpack the job's code into dest and build its packages; the virtual environment, or None without one."""
    cache = cache_root(env)
    digest, git_url = env.get(CODE_DIGEST_ENV, ""), env.get(GIT_URL_ENV, "")
    if digest:
        print(f"gridlane: code bundle {digest[:12]}", file=sys.stderr, flush=True)
        extract(fetch_bundle(env.get(CODE_URL_ENV, ""), env.get(SECRET_ENV, ""), digest, cache), dest)
    elif git_url:
        commit = env.get(GIT_COMMIT_ENV, "")
        print(f"gridlane: code from {git_url} at {commit[:12]}", file=sys.stderr, flush=True)
        extract(git_archive(git_url, commit, cache, env), dest)
    requirements = env.get(REQUIREMENTS_ENV, "")
    if not requirements.strip():
        return None
    return build_venv(requirements, cache, env)


def main(env: Mapping[str, str] | None = None, out: IO[str] | None = None) -> int:
    try:
        venv = prepare(Path.cwd(), os.environ if env is None else env)
    except (Refused, OSError, subprocess.SubprocessError) as error:
        print(f"gridlane: the job's code or packages could not be made ready: {error}", file=sys.stderr)
        return FAILED
    print(str(venv) if venv is not None else "", file=out or sys.stdout)
    return 0


if __name__ == "__main__":  # `python3 -c "$text"` in a wrapper, as well as `python3 node.py`
    sys.exit(main())
