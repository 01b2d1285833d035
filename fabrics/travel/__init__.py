"""Code and packages that travel with a job: the shell every fabric runs before the job's command. Pure.

The portal puts the job's code reference and requirements into its environment (GRIDLANE_CODE_*,
GRIDLANE_REQUIREMENTS; portal.code). Before the command, the job runs `fabrics/travel/node.py` (its text, with
the node's python3): it unpacks the code into the directory the job runs in and prints the virtual
environment it built, which then comes first on PATH. The lines here are fixed text with nothing of the user's
in them; the user's values reach the program through the environment, as data.

    local, agent     in the job's own folder (its cwd)
    Slurm, PBS       in ~/.gridlane/work/<run id> (a cluster's home is shared, so every node of a gang sees it)
    Kubernetes       an init container in the job's image fills an emptyDir at /gridlane, and the job runs in
                     /gridlane/work with /gridlane/venv first on PATH
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from pathlib import Path

from fabrics.travel.node import CODE_DIGEST_ENV, FAILED, GIT_URL_ENV
from fabrics.travel.node import REQUIREMENTS_ENV as REQUIREMENTS_ENV  # for the fabrics that read it

PROGRAM = (Path(__file__).with_name("node.py")).read_text(encoding="utf-8")
BATCH_WORKDIR = '"$HOME/.gridlane/work/$GRIDLANE_WORKLOAD_ID"'  # shell words, expanded on the node
MOUNT = "/gridlane"  # Kubernetes: the emptyDir the init container fills
VOLUME = "gridlane-code"
INIT_NAME = "gridlane-code"


def wanted(env: Mapping[str, str]) -> bool:
    """Whether the job brings code or packages."""
    return bool(env.get(CODE_DIGEST_ENV) or env.get(GIT_URL_ENV) or env.get(REQUIREMENTS_ENV, "").strip())


def preamble(env: Mapping[str, str], workdir: str = "") -> list[str]:
    """Shell lines that make the job's code and packages ready before its command (none when it brings neither).

    workdir: shell words naming the directory to run in, made if missing ("" : where the job already is)."""
    if not wanted(env):
        return []
    lines = ["# Gridlane: the workload's code and packages (fabrics.travel), before its command.\n"]
    if workdir:
        lines.append(f"mkdir -p {workdir} && cd {workdir} || exit {FAILED}\n")
    lines += [
        f"_gl_travel={shlex.quote(PROGRAM)}\n",
        f'_gl_venv=$("${{GRIDLANE_PYTHON:-python3}}" -c "$_gl_travel") || exit {FAILED}\n',
        "unset _gl_travel\n",
        'if [ -n "$_gl_venv" ]; then PATH="$_gl_venv/bin:$PATH"; VIRTUAL_ENV=$_gl_venv; export PATH VIRTUAL_ENV; fi\n',
        "unset _gl_venv\n",
    ]
    return lines


def with_preamble(script: str, env: Mapping[str, str], workdir: str = "") -> str:
    """A script with the preamble after its `#!` line (the whole script when it brings nothing)."""
    lines = preamble(env, workdir)
    if not lines:
        return script
    first, newline, rest = script.partition("\n")
    if first.startswith("#!"):
        return first + newline + "".join(lines) + rest
    return "".join(lines) + script


# Kubernetes: the init container's shell (in the job's image, so its python3 builds a venv the job's can use;
# the program is its first argument), and the line before the job's command that puts that venv first on PATH.
INIT_SCRIPT = f"""\
mkdir -p {MOUNT}/work && cd {MOUNT}/work || exit {FAILED}
_gl_venv=$(GRIDLANE_CACHE={MOUNT}/cache python3 -c "$1") || exit {FAILED}
if [ -n "$_gl_venv" ]; then ln -sfn "$_gl_venv" {MOUNT}/venv; fi
"""
ACTIVATE = (
    f'if [ -d {MOUNT}/venv ]; then PATH={MOUNT}/venv/bin:"$PATH"; VIRTUAL_ENV={MOUNT}/venv; '
    "export PATH VIRTUAL_ENV; fi\n"
)
