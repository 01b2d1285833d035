"""Script templates with `$name` placeholders whose values are always shell-quoted.

A template is IT's text; the values are the user's. `render` quotes every value with
`shlex.quote`, so a hostile name or command stays one word of data and never becomes shell.
"""

from __future__ import annotations

import shlex
import string
from collections.abc import Mapping, Set

from fabrics.base import TemplateError


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
