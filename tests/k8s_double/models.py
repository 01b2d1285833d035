"""The core, batch and RBAC objects' fields and types, from the official client's models, checked as an API server
decodes a body.

The `kubernetes` client's models (`kubernetes.client.models.V1Job` and the rest; the client the project pins,
generated from the API's OpenAPI document) name every field (`attribute_map`: python name -> JSON name), its type
(`openapi_types`: "str", "int", "bool", "float", "object", "datetime", "List[V1Container]", "Dict[str, str]",
"V1PodSpec") and which are required (`model_fields[...].is_required()`). The double walks a body against them:
  - a field no model names is unknown: kube-apiserver drops it with a warning, or answers 400
    `strict decoding error: unknown field "spec.template.spec.foo"` under fieldValidation=Strict;
  - a value of the wrong JSON type is a 400 `json: cannot unmarshal string into Go struct field ... of type bool`;
  - a required field that is absent is a 422 `Required value`.
Quantities (the values of resources' requests, limits and a ResourceQuota's hard) take numbers as well as text,
as resource.Quantity's JSON does; "object" (IntOrString, RawExtension) takes anything.
"""

from __future__ import annotations

import functools
import re
from typing import Any

Causes = list[tuple[str, str]]
QUANTITY_MAPS = frozenset({"limits", "requests", "hard", "capacity", "allocatable", "used"})
GO_TYPE = {"str": "string", "int": "int32", "bool": "bool", "float": "float64", "datetime": "Time", "bytes": "[]uint8"}
_LIST = re.compile(r"^List\[(.+)\]$")
_DICT = re.compile(r"^Dict\[str, (.+)\]$")


@functools.lru_cache(maxsize=512)
def model(name: str) -> Any:
    from kubernetes.client import models

    return getattr(models, name)


class Problems:
    def __init__(self) -> None:
        self.unknown: list[str] = []
        self.types: list[tuple[str, str, str]] = []  # (Go's path: no indexes or keys, JSON type found, Go type)
        self.missing: list[str] = []


def check(model_name: str, obj: dict[str, Any]) -> Problems:
    """What is wrong with `obj` as a `model_name` ("V1Job"); unknown fields are removed from it."""
    problems = Problems()
    _walk(model_name, obj, "", problems, top=True)
    return problems


def _walk(type_name: str, value: Any, path: str, problems: Problems, top: bool = False, key: str = "") -> None:
    if type_name == "object" or value is None:
        return
    if m := _LIST.match(type_name):
        if not isinstance(value, list):
            problems.types.append((_gopath(path), _json(value), f"[]{_go(m[1])}"))
            return
        for i, item in enumerate(value):
            _walk(m[1], item, f"{path}[{i}]", problems)
        return
    if m := _DICT.match(type_name):
        if not isinstance(value, dict):
            problems.types.append((_gopath(path), _json(value), f"map[string]{_go(m[1])}"))
            return
        for k, item in value.items():
            if key in QUANTITY_MAPS and isinstance(item, int | float) and not isinstance(item, bool):
                continue
            _walk(m[1], item, f"{path}[{k}]", problems)
        return
    if type_name in GO_TYPE:
        if not _fits(type_name, value):
            problems.types.append((_gopath(path), _json(value), GO_TYPE[type_name]))
        return
    _object(type_name, value, path, problems, top)


def _object(type_name: str, value: Any, path: str, problems: Problems, top: bool) -> None:
    if not isinstance(value, dict):
        problems.types.append((_gopath(path), _json(value), type_name.removeprefix("V1")))
        return
    cls = model(type_name)
    by_json = {json_name: attr for attr, json_name in cls.attribute_map.items()}
    for json_name in list(value):
        at = f"{path}.{json_name}" if path else json_name
        attr = by_json.get(json_name)
        if attr is None:
            problems.unknown.append(at)
            del value[json_name]
            continue
        _walk(cls.openapi_types[attr], value[json_name], at, problems, key=json_name)
    for attr, info in cls.model_fields.items():
        json_name = cls.attribute_map.get(attr, attr)
        if info.is_required() and json_name not in value and not (top and json_name in ("apiVersion", "kind")):
            problems.missing.append(f"{path}.{json_name}" if path else json_name)


def _fits(type_name: str, value: Any) -> bool:
    if type_name in ("str", "datetime", "bytes"):  # bytes: base64 text, checked by validation.decode
        return isinstance(value, str)
    if type_name == "bool":
        return isinstance(value, bool)
    if type_name == "int":
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, int | float) and not isinstance(value, bool)


def _go(type_name: str) -> str:
    return GO_TYPE.get(type_name, type_name.removeprefix("V1"))


def _json(value: Any) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, dict):
        return "object"
    return "array" if isinstance(value, list) else "string"


def _gopath(path: str) -> str:
    """How encoding/json names a field: the path without list indexes or map keys."""
    return re.sub(r"\[[^\]]*\]", "", path)
