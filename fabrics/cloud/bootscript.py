"""Cloud-init user data for a burst instance: IT's template with the values one instance needs filled in.

Placeholders are {{server}}, {{token}} (the one-time enrollment token), {{name}} (the agent's host name),
{{gpus}} (the instance type's GPUs) and {{queue_args}} ("--queue a --queue b"); each value is shell-quoted
before it goes in. A template is a shell
script ("#!...") or "#cloud-config" YAML.
"""

from __future__ import annotations

import re
import shlex
import subprocess
from collections.abc import Sequence

import yaml

PLACEHOLDER = re.compile(r"\{\{\s*([a-z_]+)\s*\}\}")
KNOWN = frozenset({"server", "token", "name", "gpus", "queue_args"})
MAX_BYTES = 16 * 1024  # EC2 takes at most 16 KB of user data

DEFAULT = """#!/bin/bash
# Gridlane burst instance: install the agent, enroll it with its one-time token, serve the pool's queues.
set -euo pipefail
python3 -m venv /opt/gridlane
/opt/gridlane/bin/pip install --quiet gridlane
exec /opt/gridlane/bin/gridlane --server {{server}} agent --enroll {{token}} --name {{name}} --gpus {{gpus}} \\
    {{queue_args}}
"""


class BootScriptError(ValueError):
    """The template does not parse, names an unknown placeholder, or leaves the token out."""


def render(template: str, server: str, token: str, name: str, queues: Sequence[str], gpus: int = 0) -> str:
    values = {
        "gpus": str(int(gpus)),
        "server": shlex.quote(server),
        "token": shlex.quote(token),
        "name": shlex.quote(name),
        "queue_args": " ".join(f"--queue {shlex.quote(q)}" for q in queues),
    }
    return PLACEHOLDER.sub(lambda m: values[m.group(1)], template)


def check(template: str) -> None:
    """Raise BootScriptError unless the template renders to user data that parses."""
    names = set(PLACEHOLDER.findall(template))
    unknown = names - KNOWN
    if unknown:
        raise BootScriptError(f"Unknown placeholder(s): {', '.join(sorted(unknown))}; use {', '.join(sorted(KNOWN))}.")
    if "token" not in names:
        raise BootScriptError("The boot script must pass {{token}} to the agent: it is how the instance enrolls.")
    rendered = render(template, "https://gridlane.example", "t0ken", "burst-0", ["gpu"], 1)
    if len(rendered.encode()) > MAX_BYTES:
        raise BootScriptError(f"User data is limited to {MAX_BYTES // 1024} KB.")
    first = rendered.split("\n", 1)[0]
    if first.startswith("#cloud-config"):
        try:
            parsed = yaml.safe_load(rendered)
        except yaml.YAMLError as error:
            raise BootScriptError(f"The #cloud-config does not parse: {error}") from error
        if not isinstance(parsed, dict):
            raise BootScriptError("A #cloud-config must be a mapping (runcmd:, packages:, ...).")
        return
    if not first.startswith("#!"):
        raise BootScriptError("User data must start with #! (a script) or #cloud-config.")
    if "sh" in first:  # a shell script: let the shell say whether it parses
        checked = subprocess.run(["bash", "-n"], input=rendered, capture_output=True, text=True, timeout=10)
        if checked.returncode != 0:
            raise BootScriptError(f"The script does not parse: {checked.stderr.strip()[:300]}")
