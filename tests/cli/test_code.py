"""`gridlane submit --code DIR --requirements FILE -- CMD ...` end to end: a real CLI process against a live server,
the worker's cycle, and the local fabric's real jobs, which fetch the bundle and build their packages (a wheel built
here: no network)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from portal.accounts.models import ApiToken
from portal.code import services as code_services
from portal.worker import tasks
from portal.workloads.models import Workload
from portal.workloads.states import State
from tests.conftest import wait_until
from tests.fabrics.travel.helpers import tiny_wheel

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def gridlane(live_server, alice, tmp_path, settings, monkeypatch, local_jobs):
    settings.GRIDLANE_PUBLIC_URL = live_server.url  # where the jobs fetch their bundle
    settings.GRIDLANE_CODE_DIR = tmp_path / "bundles"
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "node-cache"))  # the jobs' cache on this "node"
    _, token = ApiToken.issue(alice, "cli")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "GRIDLANE_URL": live_server.url, "GRIDLANE_TOKEN": token,
           "XDG_CONFIG_HOME": str(tmp_path / "config")}  # fmt: skip

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "gridlane_cli.main", *args], capture_output=True, text=True,
                              env=env, cwd=tmp_path, timeout=60)  # fmt: skip

    return run


def test_a_tree_and_its_packages_travel_with_the_command_and_a_second_submit_uploads_nothing(
    gridlane, tmp_path, monkeypatch
):
    project = tmp_path / "project"
    (project / "helpers").mkdir(parents=True)
    (project / "helpers" / "__init__.py").write_text("VALUE = 7\n")
    (project / ".gitignore").write_text("secret.txt\n")
    (project / "secret.txt").write_text("stays home\n")
    requirements = tmp_path / "requirements.txt"
    requirements.write_text(f"--no-index\n{tiny_wheel(tmp_path / 'wheels')}\n")
    uploads: list[str] = []
    real_upload = code_services.do_upload

    def counted(user, group, digest, stream, declared):
        uploads.append(digest)
        return real_upload(user, group, digest, stream, declared)

    monkeypatch.setattr(code_services, "do_upload", counted)
    # Each word arrives as given: the quotes, the two spaces and the $ survive to the job's Python.
    probe = 'import helpers, os, sys, tinypkg; print("got", helpers.VALUE, tinypkg.VALUE, os.path.exists("secret.txt"))'
    words = ["--queue", "train", "--code", str(project), "--requirements", str(requirements),
             "--", "python", "-c", probe + '; print(sys.argv[1:])', "a  b", "$HOME"]  # fmt: skip
    first, second = gridlane("submit", *words), gridlane("submit", *words)
    assert first.returncode == 0, first.stderr
    assert second.returncode == 0, second.stderr
    assert len(uploads) == 1
    assert "is on the portal already" in second.stderr
    ids = [first.stdout.strip(), second.stdout.strip()]
    jobs = Workload.objects.filter(pk__in=ids)
    assert {w.code["digest"] for w in jobs} == {uploads[0]}

    def finished() -> bool:
        tasks.cycle()
        return not jobs.exclude(state__in=[State.SUCCEEDED, State.FAILED]).exists()

    wait_until(finished, timeout=180, every=0.2)
    for w in Workload.objects.filter(pk__in=ids):
        assert w.state == State.SUCCEEDED, w.log_tail
        assert "got 7 42 False\n['a  b', '$HOME']\n" in w.log_tail


def test_a_directory_over_the_sites_cap_is_refused_before_it_is_sent(gridlane, tmp_path, settings):
    settings.GRIDLANE_CODE_MAX_MB = 0.001
    project = tmp_path / "big"
    project.mkdir()
    (project / "data.txt").write_text("x" * 5000)
    answer = gridlane("submit", "--queue", "train", "--code", str(project), "--", "true")
    assert answer.returncode == 1
    assert "this site takes code up to 0.0 MB" in answer.stderr
    assert not Workload.objects.exists()


def test_a_git_commit_must_be_a_full_sha(gridlane):
    answer = gridlane("submit", "--queue", "train", "--git", "https://git.example.org/ml.git@main", "--", "true")
    assert answer.returncode == 1
    assert "the commit as its full 40-hex sha" in answer.stderr
