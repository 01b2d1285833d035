"""WorkloadIn.parse, the single submit's parser: the same request, or the same errors, as a new WorkloadIn
would give for any body, however many bodies the instance it keeps has parsed before, in any thread."""

from __future__ import annotations

import threading
from decimal import Decimal
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from rest_framework.exceptions import ValidationError

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
