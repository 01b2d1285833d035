"""Text in a parsed JSON body that cannot be kept, refused naming its field: a NUL character (PostgreSQL's text
cannot hold one), a lone surrogate (`"\\ud800"`: not Unicode text), and bytes that are not UTF-8 (the parser
decodes with surrogateescape so that they land in the string they were in, as lone surrogates of their own).

The refusal has the API's error shape with the field's name: `{"errors": {"name": [...]}}`, dotted for a
nested field (`resources.image`), and by index for a bulk submit's items, as the bulk endpoint reports its
own errors: `{"errors": {"items": {"3": {"command": [...]}}}}`. A name (a key) that cannot be kept is named
by where it is. Nesting past the parser's depth is refused on "detail" (no field is to blame).
"""

from __future__ import annotations

from typing import Any

from rest_framework.exceptions import ParseError

Path = tuple[str | int, ...]


class FieldParseError(ParseError):
    """A parse error that belongs to a field: `errors` is the body of the answer's "errors"."""

    def __init__(self, errors: dict[str, Any]) -> None:
        super().__init__("JSON parse error - a field holds text that cannot be kept.")
        self.errors = errors


def problem(text: str) -> str:
    """Why this text cannot be kept ("" when it can)."""
    if "\x00" in text:
        return "Text may not contain NUL characters."
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as error:
        if any(0xDC80 <= ord(c) <= 0xDCFF for c in text[error.start : error.end]):
            return "Not UTF-8 text: send the body as UTF-8."
        return "Holds a lone surrogate: not Unicode text."
    return ""


def check(value: Any, max_depth: int) -> None:
    """FieldParseError naming the first field whose text (or name) cannot be kept; ParseError on "detail" for
    nesting deeper than `max_depth`. No recursion."""
    stack: list[tuple[Any, Path]] = [(value, ())]
    while stack:
        item, path = stack.pop()
        if isinstance(item, str):
            if why := problem(item):
                raise FieldParseError(errors_at(path, why))
        elif isinstance(item, dict | list):
            if len(path) >= max_depth:
                raise ParseError(f"JSON parse error - nested more than {max_depth} levels deep.")
            if isinstance(item, dict):
                for key, child in item.items():
                    if why := problem(key):
                        raise FieldParseError(errors_at(path, f"A field's name: {why[0].lower()}{why[1:]}"))
                    stack.append((child, (*path, key)))
            else:
                stack.extend((child, (*path, index)) for index, child in enumerate(item))


def errors_at(path: Path, message: str) -> dict[str, Any]:
    """The errors body for a message about the field at `path`."""
    if len(path) >= 2 and path[0] == "items" and isinstance(path[1], int):
        return {"items": {str(path[1]): {_dotted(path[2:]): [message]}}}
    return {_dotted(path): [message]}


def _dotted(path: Path) -> str:
    return ".".join(str(part) for part in path) or "detail"
