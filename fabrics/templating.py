"""Script templates with `$name` placeholders whose values are always shell-quoted.

A template is IT's text; the values are the user's. `render` quotes every value with
`shlex.quote`, so a hostile name or command stays one word of data and never becomes shell.
"""

from __future__ import annotations

import shlex
import string
from collections.abc import Mapping, Set
from urllib.parse import urlsplit

from fabrics.base import JobSpec, TemplateError


def placeholders(template: str) -> set[str]:
    """The placeholder names a template uses; TemplateError when a `$` is malformed."""
    names: set[str] = set()
    for match in string.Template.pattern.finditer(template):
        if match.group("invalid") is not None:
            line = template.count("\n", 0, match.start()) + 1
            raise TemplateError(
                f"line {line}: a '$' must start a placeholder like $name or ${{name}} (write $$ for a '$')"
            )
        name = match.group("named") or match.group("braced")
        if name:
            names.add(name)
    return names


def check(template: str, allowed: Set[str]) -> None:
    unknown = placeholders(template) - allowed
    if unknown:
        raise TemplateError(
            f"unknown placeholder(s): {', '.join(sorted(unknown))}; allowed: {', '.join(sorted(allowed))}"
        )


def render(template: str, values: Mapping[str, object]) -> str:
    check(template, set(values))
    quoted = {key: shlex.quote(str(value)) for key, value in values.items()}
    return string.Template(template).substitute(quoted)


# A `#` that starts a word starts a comment.
_WORD_BREAKS = " \t\n;&|()<>"


def check_quoting(template: str) -> None:
    """Raise TemplateError when a placeholder sits where its shell quoting would not protect it.

    render() quotes values for the shell's plain context. Inside '...' or "...", after a
    backslash, in a comment or in a here-document that expands, the same quoted value can close
    the quote or the line and turn a user's data into commands. The check is conservative.
    """
    pattern = string.Template.pattern
    state = "code"  # or "'", '"', "comment"
    heredocs: list[tuple[str, bool, bool]] = []  # delimiter, strips tabs, expands
    i = 0
    while i < len(template):
        c = template[i]
        if c == "$":
            match = pattern.match(template, i)
            if match and match.group("escaped"):
                i += 2
                continue
            if match and (match.group("named") or match.group("braced")) and state != "code":
                where = {"'": "single quotes", '"': "double quotes", "comment": "a comment"}[state]
                _unsafe(template, i, f"a placeholder inside {where}")
            i = match.end() if match else i + 1
            continue
        if c == "\n":
            state = "code" if state == "comment" else state
            i += 1
            if state == "code" and heredocs:
                i = _skip_heredocs(template, i, heredocs)
                heredocs = []
            continue
        if state == "'":
            state = "code" if c == "'" else state
        elif state == '"':
            if c == "\\" and not template.startswith("$", i + 1):
                i += 1  # an escaped character; a `$` after it is still looked at above
            elif c == '"':
                state = "code"
        elif state == "code":
            if c == "\\":
                after = pattern.match(template, i + 1)
                if after and (after.group("named") or after.group("braced")):
                    _unsafe(template, i, "a placeholder after a backslash")
                i += 0 if template.startswith("$", i + 1) else 1
            elif c in "'\"":
                state = c
            elif c == "#" and (i == 0 or template[i - 1] in _WORD_BREAKS):
                state = "comment"
            elif template.startswith("<<", i) and not template.startswith("<<<", i):
                heredocs.append(_heredoc(template, i + 2))
                i += 1
        i += 1


def _heredoc(template: str, i: int) -> tuple[str, bool, bool]:
    """The here-document whose `<<` ends just before i: its delimiter, `<<-`, and whether it expands."""
    strip_tabs = template.startswith("-", i)
    rest = template[i + strip_tabs :].lstrip(" \t")
    end = next((k for k, ch in enumerate(rest) if ch in _WORD_BREAKS), len(rest))
    word = rest[:end]
    expands = not any(ch in word for ch in "'\"\\")
    return word.translate({ord(ch): None for ch in "'\"\\"}), strip_tabs, expands


def _skip_heredocs(template: str, i: int, heredocs: list[tuple[str, bool, bool]]) -> int:
    """Check the bodies of the pending here-documents that start at i; the index after them."""
    pattern = string.Template.pattern
    for delimiter, strip_tabs, expands in heredocs:
        while i < len(template):
            end = template.find("\n", i)
            end = len(template) if end < 0 else end
            line = template[i:end]
            i = end + 1
            if (line.lstrip("\t") if strip_tabs else line) == delimiter:
                break
            for match in pattern.finditer(line):
                if expands and (match.group("named") or match.group("braced")):
                    _unsafe(template, i - 1, "a placeholder in an expanding here-document (quote its EOF)")
    return i


def _unsafe(template: str, i: int, what: str) -> None:
    line = template.count("\n", 0, i) + 1
    raise TemplateError(f"line {line}: {what}; values come quoted, so put placeholders bare in the script")


def check_url_template(template: object, fields: Set[str], *, setting: str, example: str) -> None:
    """A fabric's connect-URL template (where a notebook is opened): an http(s) URL whose only {fields} are
    `fields`. ValueError naming the setting, with `example`, otherwise."""
    if not isinstance(template, str):
        raise ValueError(f"settings.{setting}: text such as {example}")
    try:
        used = {f for _, f, _, _ in string.Formatter().parse(template) if f is not None}
    except ValueError as exc:
        raise ValueError(f"settings.{setting} does not parse: {exc}") from exc
    unknown = used - fields
    if unknown:
        allowed = ", ".join("{" + f + "}" for f in sorted(fields))
        raise ValueError(f"settings.{setting} may use {allowed}; not {', '.join(sorted(unknown)) or '{}'}")
    try:
        sample = template.format(**dict.fromkeys(fields, "x"))
    except (IndexError, KeyError, ValueError) as exc:
        raise ValueError(f"settings.{setting} does not fill in: {exc}") from exc
    parts = urlsplit(sample)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError(f"settings.{setting} must be an http(s) URL, e.g. {example}")


def job_values(job: JobSpec) -> dict[str, object]:
    """The workload's own values every fabric's template may use; each fabric adds how it counts resources."""
    return {
        "workload_id": job.workload_id,
        "name": job.name,
        "owner": job.owner,
        "group": job.group,
        "queue": job.queue,
        "command": job.command,
        "image": job.image,
        "nodes": job.nodes,
        "memory_mib": job.per_node.memory_mib,
        "runtime_limit_s": job.runtime_limit_s,
    }
