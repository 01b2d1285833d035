"""fabrics/travel/node.py, the program a job runs before its command: against a real HTTP server, real git, real
pip (with a wheel built here: no network), and archives made to attack it."""

from __future__ import annotations

import hashlib
import http.server
import stat
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fabrics.travel import node
from tests.fabrics.travel.helpers import archive, tiny_wheel

SECRET = "s" * 64


class Portal:
    """A loopback server that answers GET /bundle with `body` to the right secret (else 404), counting requests."""

    def __init__(self) -> None:
        self.body = b""
        self.requests = 0
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                outer.requests += 1
                if self.headers.get("Authorization") != f"Bearer {SECRET}":
                    self.send_error(404)
                    return
                self.send_response(200)
                self.send_header("Content-Length", str(len(outer.body)))
                self.end_headers()
                self.wfile.write(outer.body)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/bundle"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


@pytest.fixture
def portal() -> Iterator[Portal]:
    served = Portal()
    yield served
    served.server.shutdown()
    served.server.server_close()


def env_for(tmp_path: Path, **values: str) -> dict[str, str]:
    return {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), node.CACHE_ENV: str(tmp_path / "cache"), **values}


def test_a_bundle_is_fetched_once_checked_and_unpacked_into_the_jobs_folder(tmp_path, portal):
    portal.body = archive([("pkg", "dir", ""), ("pkg/mod.py", "file", "X = 1\n"), ("link", "symlink", "pkg/mod.py")])
    digest = hashlib.sha256(portal.body).hexdigest()
    env = env_for(tmp_path, GRIDLANE_CODE_URL=portal.url, GRIDLANE_CODE_DIGEST=digest, GRIDLANE_ENDPOINT_SECRET=SECRET)
    for job in ("one", "two"):
        (tmp_path / job).mkdir()
        assert node.prepare(tmp_path / job, env) is None
        assert (tmp_path / job / "pkg" / "mod.py").read_text() == "X = 1\n"
        assert (tmp_path / job / "link").resolve() == (tmp_path / job / "pkg" / "mod.py")
    assert portal.requests == 1  # the second job found it in the node's cache


def test_a_tampered_bundle_is_refused_and_never_cached(tmp_path, portal):
    portal.body = archive([("train.py", "file", "print('evil')\n")])
    wanted = hashlib.sha256(archive([("train.py", "file", "print('good')\n")])).hexdigest()
    env = env_for(tmp_path, GRIDLANE_CODE_URL=portal.url, GRIDLANE_CODE_DIGEST=wanted, GRIDLANE_ENDPOINT_SECRET=SECRET)
    with pytest.raises(node.Refused, match=f"not {wanted}"):
        node.prepare(tmp_path, env)
    assert not (tmp_path / "train.py").exists()
    assert list((tmp_path / "cache" / "code").glob("*.tar.gz")) == []


def test_a_wrong_secret_gets_nothing(tmp_path, portal):
    portal.body = archive([("a", "file", "")])
    env = env_for(tmp_path, GRIDLANE_CODE_URL=portal.url, GRIDLANE_CODE_DIGEST=hashlib.sha256(portal.body).hexdigest(),
                  GRIDLANE_ENDPOINT_SECRET="wrong")  # fmt: skip
    with pytest.raises(node.Refused, match="cannot fetch"):
        node.prepare(tmp_path, env)


ATTACKS = [
    ("a parent path", [("../evil.py", "file", "x")], "outside its directory"),
    ("an absolute path", [("/tmp/evil.py", "file", "x")], "outside its directory"),
    ("a nested parent", [("ok/../../evil.py", "file", "x")], "outside its directory"),
    ("a link out", [("l", "symlink", "../../etc")], "links outside"),
    ("an absolute link", [("l", "symlink", "/etc/passwd")], "links outside"),
    ("a hard link out", [("h", "hardlink", "../x")], "links outside"),
    ("a file through a link", [("d", "dir", ""), ("l", "symlink", "d"), ("l/f", "file", "x")], "through a link"),
    ("a fifo", [("p", "fifo", "")], "neither a file"),
]


@pytest.mark.parametrize(("members", "refusal"), [a[1:] for a in ATTACKS], ids=[a[0] for a in ATTACKS])
def test_an_archive_that_reaches_outside_its_folder_is_refused_before_anything_lands(tmp_path, members, refusal):
    path = tmp_path / "bad.tar.gz"
    path.write_bytes(archive(members))
    dest = tmp_path / "job" / "work"
    dest.mkdir(parents=True)
    with pytest.raises(node.Refused, match=refusal):
        node.extract(path, dest)
    assert list(dest.iterdir()) == []
    assert not (tmp_path / "evil.py").exists()


def test_folders_and_files_unpack_readable_by_the_jobs_user_whatever_modes_the_archive_says(tmp_path):
    path = tmp_path / "b.tar.gz"
    path.write_bytes(archive([("pkg", "dir", ""), ("pkg/__init__.py", "file", "VALUE = 7\n")], mode=0o600))
    node.extract(path, tmp_path / "out")
    assert stat.S_IMODE((tmp_path / "out" / "pkg").stat().st_mode) == 0o755
    assert stat.S_IMODE((tmp_path / "out" / "pkg" / "__init__.py").stat().st_mode) == 0o644


def test_requirements_build_one_venv_per_node_even_when_two_jobs_start_together(tmp_path, monkeypatch):
    wheel = tiny_wheel(tmp_path / "wheels")
    env = env_for(tmp_path, GRIDLANE_REQUIREMENTS=f"{wheel}\n", PIP_NO_INDEX="1")
    steps: list[str] = []
    real_step = node._step

    def counted(argv: list[str], run_env: Any) -> None:
        steps.append(argv[1])
        real_step(argv, run_env)

    monkeypatch.setattr(node, "_step", counted)
    got: list[Path | None] = []
    jobs = [threading.Thread(target=lambda: got.append(node.prepare(tmp_path, env))) for _ in range(2)]
    for job in jobs:
        job.start()
    for job in jobs:
        job.join(timeout=120)
    assert len(got) == 2
    assert got[0] == got[1]
    assert got[0] is not None
    assert steps == ["-m", "-m"]  # venv, then pip install: once, not once per job
    ran = subprocess.run([str(got[0] / "bin" / "python"), "-c", "import tinypkg; print(tinypkg.VALUE)"],
                         capture_output=True, text=True, check=True)  # fmt: skip
    assert ran.stdout == "42\n"


def test_a_failed_build_leaves_nothing_for_the_next_job_to_trust(tmp_path):
    env = env_for(tmp_path, GRIDLANE_REQUIREMENTS=f"{tmp_path}/no-such.whl\n", PIP_NO_INDEX="1")
    with pytest.raises(node.Refused, match="building the job's packages failed"):
        node.prepare(tmp_path, env)
    assert [p for p in (tmp_path / "cache" / "venv").iterdir() if p.suffix != ".lock"] == []


def test_a_git_repository_at_a_commit_is_cloned_once_and_unpacked_without_its_history(tmp_path):
    repo = tmp_path / "repo"
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@example.org", "-C", str(repo)]
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    (repo / "train.py").write_text("first\n")
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-qm", "one"], check=True)
    commit = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
    (repo / "train.py").write_text("second\n")
    subprocess.run([*git, "commit", "-qam", "two"], check=True)
    env = env_for(tmp_path, GRIDLANE_CODE_GIT=f"file://{repo}", GRIDLANE_CODE_COMMIT=commit, GIT_ALLOW_PROTOCOL="file")
    (tmp_path / "job").mkdir()
    node.prepare(tmp_path / "job", env)
    assert (tmp_path / "job" / "train.py").read_text() == "first\n"
    assert not (tmp_path / "job" / ".git").exists()
    subprocess.run(["rm", "-rf", str(repo)], check=True)  # the second job needs only the node's cache
    (tmp_path / "again").mkdir()
    node.prepare(tmp_path / "again", env)
    assert (tmp_path / "again" / "train.py").read_text() == "first\n"


def test_a_file_url_is_refused_unless_the_node_allows_it(tmp_path):
    subprocess.run(["git", "init", "-q", str(tmp_path / "repo")], check=True)
    env = env_for(tmp_path, GRIDLANE_CODE_GIT=f"file://{tmp_path / 'repo'}", GRIDLANE_CODE_COMMIT="a" * 40)
    with pytest.raises(node.Refused, match="git clone failed"):
        node.prepare(tmp_path, env)


def test_the_program_run_as_text_prints_the_venv_and_says_why_it_fails(tmp_path):
    """As wrappers run it: `python3 -c "$text"`, in the job's folder, exit 90 with a reason."""
    from fabrics.travel import PROGRAM

    env = env_for(tmp_path, GRIDLANE_CODE_GIT="https://127.0.0.1:9/none.git", GRIDLANE_CODE_COMMIT="b" * 40)
    done = subprocess.run(["python3", "-c", PROGRAM], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert done.returncode == node.FAILED
    assert "gridlane: the job's code or packages could not be made ready: git clone failed" in done.stderr
    assert done.stdout == ""
