"""Every command block of the README and docs/ runs, as written, on what a newcomer has after `make run`.

The convention (docs/internals.md#docs-that-run):
- a block marked `bash` is run: each on its own (a reader may start at any block), from the clone's folder, with
  no GRIDLANE_ variable set, against one portal served as `make run` serves it (demo mode, SQLite in var/, web
  and worker). Two things differ from a newcomer's terminal, and only these: the clone is a fresh copy whose
  var/ is new (GRIDLANE_VAR_DIR names it, since the copy's files are links to this tree), and `127.0.0.1:8000`
  in a block becomes the test portal's free port;
- a `bash` block made only of `make` lines is run as `make -n` (the suite cannot install and serve from inside
  itself): it must be a target that exists and whose commands make can spell out;
- `text` shows output, or steps for another machine (a production install) that cannot run here and that
  tests/deploy exercises. Nothing else is allowed (no `shell` checked for its syntax only), so no command block
  escapes;
- a `bash` block calls only the programs of PROGRAMS (it runs on the machine of whoever runs the suite).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import wait_until
from tests.docs.markdown import DOCUMENTS, ROOT, Block, blocks
from tests.test_embedded_smoke import free_port, up

KINDS = {"bash", "text"}
# What a `bash` block may call: it runs on the machine of whoever runs the suite, so nothing that installs,
# reaches beyond the clone's folder and the test portal, or needs root (a production install is `text`).
PROGRAMS = {".venv/bin/python", ".venv/bin/gridlane", "curl", "make", "export", "mkdir", "printf", "echo", "for",
            "done", "tail", "head", "cat"}  # fmt: skip
COMMAND = re.compile(r"(?:^|&&|\|\||[|;(])\s*(?:(?:do|then|else)\s+)?((?:[A-Za-z_]\w*=\S*\s+)*)([^\s;|&()]+)")
ALL = [b for path in DOCUMENTS for b in blocks(path)]


def only_make(text: str) -> bool:
    lines = [line for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    return bool(lines) and all(line.split()[0] == "make" for line in lines)


RUN = [b for b in ALL if b.info == "bash" and not only_make(b.text)]
MAKE = [b for b in ALL if b.info == "bash" and only_make(b.text)]
ACTIVE = {"pending", "admitted", "dispatching", "running", "cancelling", "preempted"}


def test_every_fenced_block_says_whether_it_runs():
    assert [f"{b}: {b.info or '(none)'}" for b in ALL if b.info not in KINDS] == []
    assert RUN, "the README's first commands are run"


def programs(text: str) -> set[str]:
    """The programs a block calls: the first word of each command (after any VAR=value), quotes left out."""
    unquoted = re.sub(r"'[^']*'|\"(?:[^\"\\\\]|\\\\.)*\"", "''", text.replace("\\\n", " "))
    found = set()
    for line in unquoted.splitlines():
        code = line.split("#", 1)[0]
        found |= {m.group(2) for m in COMMAND.finditer(code) if "=" not in m.group(2)}
    return found


@pytest.mark.parametrize("block", [b for b in ALL if b.info == "bash"], ids=str)
def test_bash_blocks_call_only_what_the_suite_may_run_here(block):
    assert programs(block.text) - PROGRAMS == set()


def test_the_program_finder_sees_every_command_of_a_line():
    text = 'TOKEN=$(A=1 sudo x | tail -n 1) && curl -d \'{"a": "b; rm"}\' \\\n  x; for i in 1; do useradd $i; done\n'
    assert programs(text) == {"sudo", "tail", "curl", "for", "useradd", "done"}


@pytest.mark.parametrize("block", MAKE, ids=str)
def test_make_lines_name_targets_make_can_spell_out(block):
    for line in block.text.splitlines():
        words = line.split("#", 1)[0].split()
        if not words:
            continue
        dry = subprocess.run(["make", "-n", *words[1:]], cwd=ROOT, capture_output=True, text=True, timeout=60)
        assert dry.returncode == 0, f"{block}: {line}: {dry.stderr}"
        assert "manage.py" in dry.stdout or "pytest" in dry.stdout, f"{block}: {line}: {dry.stdout}"


@dataclass
class Portal:
    clone: Path
    var: Path
    port: int
    env: dict[str, str]  # a newcomer's terminal: nothing of Gridlane's set


def newcomer_env(tmp: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GRIDLANE_", "DJANGO_")) and k != "DATABASE_URL"}
    return env | {
        "XDG_CONFIG_HOME": str(tmp / "config"),  # no config file of the CLI's from elsewhere
        "XDG_CACHE_HOME": str(tmp / "cache"),
        "PYTHONPATH": str(ROOT),  # the `gridlane` script imports this tree's CLI
    }


@pytest.fixture
def portal(tmp_path: Path) -> Iterator[Portal]:
    """One portal for every block: a fresh clone (links to this tree, a new var/), served as `make run` does."""
    tmp = tmp_path
    clone = tmp / "gridlane"
    clone.mkdir()
    for entry in ROOT.iterdir():
        if entry.name not in {"var", ".git"}:
            (clone / entry.name).symlink_to(entry)
    var = clone / "var"
    env = newcomer_env(tmp) | {"GRIDLANE_VAR_DIR": str(var)}
    serving = env | {"GRIDLANE_DEMO": "1", "PYTHONUNBUFFERED": "1"}  # what the Makefile's run target sets
    python = str(clone / ".venv" / "bin" / "python") if (clone / ".venv").exists() else sys.executable
    for command in (["migrate", "--no-input", "-v0"], ["seed_demo"]):
        done = subprocess.run([python, "manage.py", *command], env=serving, cwd=clone, capture_output=True, text=True)
        assert done.returncode == 0, done.stderr[-3000:]
    port = free_port()
    log = open(tmp / "portal.log", "wb")  # noqa: SIM115 (closed below)
    process = subprocess.Popen(
        [python, "manage.py", "run_portal", "--port", str(port)],
        env=serving,
        cwd=clone,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        wait_until(lambda: up(f"http://127.0.0.1:{port}/healthz"), timeout=60, every=0.2)
        yield Portal(clone, var, port, env)
        settle(clone, serving, python)
    finally:
        os.killpg(process.pid, signal.SIGINT)  # Ctrl-C
        try:
            process.wait(timeout=30)
        finally:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
            log.close()


def settle(clone: Path, env: dict[str, str], python: str) -> None:
    """Let the blocks' work end (each is short) and cancel what has not, so no job outlives the test."""

    def active() -> list[str]:
        code = (
            "from portal.workloads.models import Workload;"
            f"print(json.dumps([str(w.pk) for w in Workload.objects.filter(state__in={sorted(ACTIVE)!r})]))"
        )
        shell = subprocess.run(
            [python, "manage.py", "shell", "-c", f"import json;{code}"],
            env=env,
            cwd=clone,
            capture_output=True,
            text=True,
            check=True,
        )
        return list(json.loads(shell.stdout.strip().splitlines()[-1]))

    try:
        wait_until(lambda: not active(), timeout=60, every=1)
    except AssertionError:
        for pk in active():
            subprocess.run(
                [python, "manage.py", "shell", "-c", f"from portal.workloads import services; "
                 f"from portal.workloads.models import Workload; w = Workload.objects.get(pk={pk!r}); "
                 "services.do_cancel(w.owner, w)"],
                env=env, cwd=clone, capture_output=True, check=False,
            )  # fmt: skip


def as_run(block: Block, port: int) -> str:
    """The block as the test runs it: only the port moves."""
    return block.text.replace("127.0.0.1:8000", f"127.0.0.1:{port}")


@pytest.mark.slow
def test_every_bash_block_runs_as_written(portal):
    """One test for all blocks, so that one portal serves them all (a parametrized test could be spread over
    several test processes, each starting its own)."""
    failed = []
    for block in RUN:
        done = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", as_run(block, portal.port)],
            cwd=portal.clone,
            env=portal.env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        if done.returncode != 0 or '"errors"' in done.stdout:
            failed.append(f"{block} exited {done.returncode}:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
    assert failed == []
