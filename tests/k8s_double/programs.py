"""What the double's kubelet runs: a container's argv read by a convention, never executed.

["/bin/sh", "-c", SCRIPT, NAME, ARGS...] (or bash, -lc, with SCRIPT in args): SCRIPT's statements (split
    on `;`, `&&` and newlines) run in order: `echo WORDS` logs a line ($VAR and ${VAR} expand from the
    container's env), `sleep N` takes N seconds, `exit N` ends with code N, `false` with 1,
    `export NAME=VALUE ...` sets the environment, `. FILE` runs a file the pod mounts (a Secret's or a
    ConfigMap's key), `exec "$@"` runs ARGS as the rest of the program, `gridlane_notebook ...`
    (Gridlane's notebook launcher) serves until it is stopped; anything else does nothing. It exits 0
    at the end.
any other argv (e.g. `jupyter lab ...`): a server that runs until it is stopped.
"""

from __future__ import annotations

import math
import os
import re
import shlex
from dataclasses import dataclass, field


@dataclass
class Program:
    lines: list[tuple[float, str]]  # (seconds after start, log line)
    duration: float  # math.inf: a server
    exit_code: int = 0


@dataclass
class Run:
    started: float
    program: Program


@dataclass
class Timers:
    bound: dict[str, float] = field(default_factory=dict)  # pod uid -> when it was bound to a node
    pull_failed: dict[str, float] = field(default_factory=dict)
    job_started: dict[str, float] = field(default_factory=dict)  # job uid -> when it (last) started
    job_finished: dict[str, float] = field(default_factory=dict)


_VAR = re.compile(r"\$\{(\w+)\}|\$(\w+)")


def program(argv: list[str], env: dict[str, str], files: dict[str, str] | None = None) -> Program:
    """What the container does, by the convention in the module docstring. `env` is changed by `export`."""
    shells = ("sh", "bash")
    if len(argv) < 3 or os.path.basename(argv[0]) not in shells or not re.fullmatch(r"-[a-z]*c", argv[1]):
        return Program([], math.inf)
    return _script(argv[2], argv[4:], env, files or {}, depth=0)


def _script(text: str, positional: list[str], env: dict[str, str], files: dict[str, str], depth: int) -> Program:
    lines: list[tuple[float, str]] = []
    at = 0.0
    for statement in re.split(r";|&&|\n", text):
        try:
            words = shlex.split(statement)
        except ValueError:
            continue
        expanded: list[str] = []
        for w in words:
            expanded += positional if w == "$@" else [_VAR.sub(lambda m: env.get(m[1] or m[2], ""), w)]
        words = expanded
        if not words:
            continue
        if words[0] == "echo":
            lines.append((at, " ".join(words[1:])))
        elif words[0] == "sleep" and len(words) > 1:
            at += float(words[1])
        elif words[0] == "exit":
            return Program(lines, at, int(words[1]) if len(words) > 1 else 0)
        elif words[0] == "false":
            return Program(lines, at, 1)
        elif words[0] == "gridlane_notebook":
            return Program(lines, math.inf)
        elif words[0] == "export" or re.fullmatch(r"\w+=.*", words[0]):
            for word in words[1:] if words[0] == "export" else words:
                name, eq, value = word.partition("=")
                if eq:
                    env[name] = value
        elif words[0] in (".", "source") and len(words) > 1 and depth < 8:
            if words[1] not in files:
                return Program([*lines, (at, f"sh: {words[1]}: not found")], at, 2)
            sourced = _script(files[words[1]], positional, env, files, depth + 1)
            lines += [(at + t, line) for t, line in sourced.lines]
            at += sourced.duration
            if sourced.exit_code or sourced.duration == math.inf:
                return Program(lines, at, sourced.exit_code)
        elif words[0] == "exec" and len(words) > 1:
            rest = program(words[1:], env, files)
            return Program(lines + [(at + t, line) for t, line in rest.lines], at + rest.duration, rest.exit_code)
    return Program(lines, at, 0)
