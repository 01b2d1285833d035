"""WorkloadIn.parse, the single submit's parser: the same request, or the same errors, as a new WorkloadIn
would give for any body, however many bodies the instance it keeps has parsed before, in any thread."""

from __future__ import annotations

import threading
from decimal import Decimal
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from rest_framework.exceptions import ValidationError

from portal.api.fast_parse import validated as common
from portal.api.serializers import BulkItemIn, WorkloadIn, request_of

# What a client may put in each field: its plain kind, and the kinds the serializer turns into it or refuses.
texts = st.text(max_size=12) | st.sampled_from(["", "   ", "gpu-queue", " batch ", "a\x00b", "\ud800", "x" * 210])
numbers = (
    st.integers(-(2**40), 2**40)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.decimals(places=4, allow_nan=False).map(str)
    | st.sampled_from(["1.5", "0.001", "0.0001", "1e3", "", "x", True, None])
)
values = texts | numbers | st.none() | st.booleans() | st.lists(st.integers(), max_size=2)
resources = st.dictionaries(st.sampled_from(["gpus", "cpus", "memory_gb", "nodes", "extra"]), values, max_size=5)
FIELDS = [*WorkloadIn().fields, "idempotency_key", "unknown"]
bodies = st.dictionaries(st.sampled_from(FIELDS), values | resources, max_size=8) | values


def fresh(data: Any, serializer: type[WorkloadIn] = WorkloadIn) -> tuple[str, Any]:
    """What a new serializer makes of data: ("valid", the request as values) or ("invalid", its errors)."""
    incoming = serializer(data=data)
    if not incoming.is_valid():
        return "invalid", incoming.errors
    return "valid", shown(request_of(incoming.validated_data, data.get("resources")))


def kept(data: Any, serializer: type[WorkloadIn] = WorkloadIn) -> tuple[str, Any]:
    try:
        return "valid", shown(serializer.parse(data))
    except ValidationError as error:
        return "invalid", error.detail


def shown(request: Any) -> dict[str, Any]:
    """A request's fields with each decimal as its text (0.5 and 0.500 are equal but fingerprint apart)."""
    values = {k: str(v) if isinstance(v, Decimal) else v for k, v in vars(request).items()}
    return values | {"fingerprint": request.fingerprint()}


@settings(max_examples=400, deadline=None)
@given(bodies, bodies)
def test_the_kept_parser_answers_as_a_new_serializer_would(first, second):
    for body in (first, second, first):  # the kept instance carries nothing from one body to the next
        assert kept(body) == fresh(body)
        assert kept(body, BulkItemIn) == fresh(body, BulkItemIn)


# Bodies of the common shape (fast_parse.validated takes them), and ones a step away from it: each value plain,
# or of a kind the serializer turns into it, or one it refuses.
plain_texts = st.text(alphabet=st.characters(max_codepoint=127), max_size=12) | st.sampled_from(
    ["gpu-queue", "a b", " padded", "trailing\t", "", "x" * 51, "x" * 201, "naïve", "a\x00b", "\ud800"]
)
plain_numbers = (
    st.integers(-(2**33), 2**33)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.sampled_from([0, 1, 0.5, 0.001, 0.0001, 2**31, 2**31 + 1, -(2**31) - 1, 1e12, True, False, None, "1", [1]])
)
common_resources = st.dictionaries(st.sampled_from(["gpus", "cpus", "memory_gb", "nodes"]), plain_numbers, max_size=4)
common_bodies = st.fixed_dictionaries(
    {"queue": plain_texts},
    optional={
        "kind": plain_texts, "name": plain_texts, "command": plain_texts, "image": plain_texts | st.none(),
        "priority": plain_texts, "resources": common_resources | st.none() | st.just([]),
        "runtime_limit_minutes": plain_numbers, "script": plain_texts, "group": plain_texts,
    },
)  # fmt: skip


def as_values(validated: dict[str, Any]) -> dict[str, Any]:
    """Validated data with each decimal as its text, nested ones too (0.5 and 0.500 are equal, not the same)."""
    return {
        k: as_values(v) if isinstance(v, dict) else (type(v).__name__, str(v)) for k, v in validated.items()
    }  # fmt: skip


@settings(max_examples=600, deadline=None)
@given(common_bodies)
def test_a_common_body_is_validated_as_drf_validates_it_or_left_to_drf(body):
    parser = WorkloadIn()
    ours = common(parser, body)
    if ours is not None:  # only what DRF takes, made into what DRF makes of it
        assert as_values(ours) == as_values(parser.run_validation(body))
    assert kept(body) == fresh(body)


def test_the_common_submit_skips_drf_and_a_body_a_step_away_goes_its_way():
    parser = WorkloadIn()
    resources = {"gpus": 0, "cpus": 0.001, "memory_gb": 0.1, "nodes": 2}
    body = {"queue": "gpu", "kind": "batch", "name": "x", "command": "true", "resources": resources,
            "runtime_limit_minutes": 5}  # fmt: skip
    assert common(parser, body) is not None
    assert kept(body) == fresh(body)
    for away in (
        {"queue": " gpu"}, {"name": "naïve"}, {"command": "a\x00b"}, {"resources": {"gpus": True}},
        {"resources": {"cpus": "2"}}, {"resources": {"nodes": 1.0}}, {"image": None}, {"group": "vision"},
        {"runtime_limit_minutes": "5"}, {"queue": ""}, {"priority": "x" * 21},
    ):  # fmt: skip
        assert common(parser, body | away) is None
        assert kept(body | away) == fresh(body | away)


def test_a_valid_body_and_a_bad_one_parse_the_same_in_many_threads_at_once():
    good = {"queue": "gpu", "command": "true", "resources": {"gpus": 0.5, "cpus": 2}, "priority": "normal"}
    bad = {"queue": "", "resources": {"gpus": "many"}, "runtime_limit_minutes": "soon"}
    expected = {"good": fresh(good), "bad": fresh(bad)}
    assert expected["good"][0] == "valid"
    assert expected["bad"][0] == "invalid"
    assert set(expected["bad"][1]) == {"queue", "resources", "runtime_limit_minutes"}
    seen: list[bool] = []
    start = threading.Barrier(8)

    def parse_many() -> None:
        start.wait()
        seen.extend(kept(good) == expected["good"] and kept(bad) == expected["bad"] for _ in range(200))

    threads = [threading.Thread(target=parse_many) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(seen) == 1600
    assert all(seen)
