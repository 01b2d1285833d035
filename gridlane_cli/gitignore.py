""".gitignore rules, as git reads them, for `gridlane submit --code`: which files of a directory travel.

The common subset, implemented here so the CLI needs nothing beyond the standard library: every .gitignore in
the tree, each relative to its own folder, a deeper file's rules after its parents' and the last match winning;
`#` comments, `!` to re-include, a trailing `/` for folders only, a slash at the start or in the middle
anchoring to the file's folder, `*`, `?`, `[a-z]` / `[!a-z]`, `**/`, `/**` and `/**/`, backslash escapes, and
trailing spaces dropped unless escaped. As in git, a file inside an ignored folder cannot be re-included (git
never looks inside). Not read: .git/info/exclude and the user's global excludes file.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Rule:
    base: str  # the folder of the .gitignore it came from, relative to the root ("" for the root)
    regex: re.Pattern[str]
    negate: bool
    dir_only: bool


def parse(text: str, base: str = "") -> list[Rule]:
    """The rules of one .gitignore whose folder is `base`."""
    rules = []
    for raw in text.splitlines():
        line = _strip_trailing_spaces(raw)
        if not line or line.startswith("#"):
            continue
        negate = line.startswith("!")
        if negate:
            line = line[1:]
        dir_only = line.endswith("/") and not line.endswith("\\/")
        line = line.rstrip("/") if dir_only else line
        if not line:
            continue
        anchored = "/" in line
        line = line.removeprefix("/")
        body = _translate(line)
        rules.append(Rule(base, re.compile(body if anchored else f"(?:.*/)?{body}", re.DOTALL), negate, dir_only))
    return rules


def ignored(rules: list[Rule], path: str, is_dir: bool) -> bool:
    """Whether `path` (relative to the root, with /) is ignored by these rules, in the order given."""
    verdict = False
    for rule in rules:
        if rule.dir_only and not is_dir:
            continue
        if rule.base:
            if not path.startswith(rule.base + "/"):
                continue
            rel = path[len(rule.base) + 1 :]
        else:
            rel = path
        if rule.regex.fullmatch(rel):
            verdict = not rule.negate
    return verdict


def _strip_trailing_spaces(line: str) -> str:
    """Trailing spaces go unless escaped with a backslash ("a\\ " keeps one)."""
    stripped = line.rstrip(" ")
    if stripped.endswith("\\") and len(stripped) < len(line):
        return stripped[:-1] + " "
    return stripped


def _translate(pattern: str) -> str:
    out, i, n = [], 0, len(pattern)
    while i < n:
        c = pattern[i]
        if pattern.startswith("**/", i) and (i == 0 or pattern[i - 1] == "/"):
            out.append("(?:.*/)?")
            i += 3
        elif pattern.startswith("/**", i) and i + 3 == n:
            out.append("/.*")
            i += 3
        elif c == "*":
            while i < n and pattern[i] == "*":  # a ** not between slashes is a plain *
                i += 1
            out.append("[^/]*")
        elif c == "?":
            out.append("[^/]")
            i += 1
        elif c == "[":
            end, klass = _klass(pattern, i)
            out.append(klass)
            i = end
        elif c == "\\" and i + 1 < n:
            out.append(re.escape(pattern[i + 1]))
            i += 2
        else:
            out.append(re.escape(c))
            i += 1
    return "".join(out)


def _klass(pattern: str, start: int) -> tuple[int, str]:
    """A bracket expression from `start` ("[") as a regex class and where it ends; one never closed matches
    nothing, as in git."""
    i = start + 1
    negate = i < len(pattern) and pattern[i] in "!^"
    i += negate
    members = []
    if i < len(pattern) and pattern[i] == "]":
        members.append("\\]")
        i += 1
    while i < len(pattern) and pattern[i] != "]":
        c = pattern[i]
        if c == "\\" and i + 1 < len(pattern):
            members.append(re.escape(pattern[i + 1]))
            i += 2
        elif c == "-" and members and i + 1 < len(pattern) and pattern[i + 1] != "]":
            members.append("-")
            i += 1
        else:
            members.append(re.escape(c) if c != "-" else "\\-")
            i += 1
    if i >= len(pattern):
        return len(pattern), "(?!)"
    body = "".join(members)
    return i + 1, f"[^/{body}]" if negate else f"(?!/)[{body}]"
