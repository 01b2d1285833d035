"""Label and field selectors as the API server reads them (a faithful subset of k8s.io/apimachinery/labels).

Labels: `a=b`, `a==b`, `a!=b`, `a in (x,y)`, `a notin (x)`, `a`, `!a`, joined by commas (AND).
Fields: `path=value`, `path==value`, `path!=value` over dotted paths such as `status.phase`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

Predicate = Callable[[Mapping[str, str]], bool]

_KEY = r"[A-Za-z0-9]([-A-Za-z0-9_./]*[A-Za-z0-9])?"
_SET = re.compile(rf"^\s*(?P<key>{_KEY})\s+(?P<op>in|notin)\s*\((?P<values>[^)]*)\)\s*$")
_EQ = re.compile(rf"^\s*(?P<key>{_KEY})\s*(?P<op>==|=|!=)\s*(?P<value>[-A-Za-z0-9_.]*)\s*$")
_EXISTS = re.compile(rf"^\s*(?P<neg>!?)\s*(?P<key>{_KEY})\s*$")


class SelectorError(ValueError):
    """The selector does not parse; the server answers 400 BadRequest."""


def _split(selector: str) -> list[str]:
    """Split on the commas outside parentheses."""
    parts, depth, start = [], 0, 0
    for i, c in enumerate(selector):
        if c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
        elif c == "," and depth == 0:
            parts.append(selector[start:i])
            start = i + 1
    parts.append(selector[start:])
    return [p for p in parts if p.strip()]


def _requirement(text: str) -> Predicate:
    if m := _SET.match(text):
        key, values = m["key"], {v.strip() for v in m["values"].split(",") if v.strip()}
        if m["op"] == "in":
            return lambda labels: labels.get(key) in values
        return lambda labels: labels.get(key) not in values
    if m := _EQ.match(text):
        key, value = m["key"], m["value"]
        if m["op"] == "!=":
            return lambda labels: labels.get(key) != value
        return lambda labels: labels.get(key) == value
    if m := _EXISTS.match(text):
        key = m["key"]
        if m["neg"]:
            return lambda labels: key not in labels
        return lambda labels: key in labels
    raise SelectorError(f"unable to parse requirement: {text.strip()!r}")


def label_selector(selector: str | None) -> Predicate:
    """A predicate over an object's labels; an empty selector matches everything."""
    requirements = [_requirement(part) for part in _split(selector or "")]
    return lambda labels: all(req(labels) for req in requirements)


def field_selector(selector: str | None) -> Callable[[Mapping[str, Any]], bool]:
    """A predicate over a whole object for field selectors such as `status.phase!=Succeeded`."""
    checks: list[tuple[list[str], str, bool]] = []
    for part in _split(selector or ""):
        m = re.match(r"^\s*([A-Za-z.]+)\s*(==|=|!=)\s*(.*?)\s*$", part)
        if not m:
            raise SelectorError(f"invalid field selector: {part.strip()!r}")
        checks.append((m[1].split("."), m[3], m[2] == "!="))

    def value_at(obj: Mapping[str, Any], path: list[str]) -> str:
        current: Any = obj
        for step in path:
            current = current.get(step) if isinstance(current, Mapping) else None
        return "" if current is None else str(current)

    return lambda obj: all((value_at(obj, path) != want) == negate for path, want, negate in checks)


OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")


def selector_matches(selector: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    """Whether a meta/v1 LabelSelector ({matchLabels, matchExpressions}) selects these labels."""
    if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    for expression in selector.get("matchExpressions") or []:
        key, values = expression.get("key", ""), set(expression.get("values") or [])
        held = {
            "In": key in labels and labels[key] in values,
            "NotIn": labels.get(key) not in values,
            "Exists": key in labels,
            "DoesNotExist": key not in labels,
        }
        if not held.get(expression.get("operator", ""), False):
            return False
    return True
