"""Every malformed body the API can receive answers JSON {"errors": ...} with 400 or 413: wrong types, deep
nesting, very large bodies, invalid encodings. Every write operation in the OpenAPI schema is sent each one."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from tests.api.malformed import BODIES


def send(client: Client, method: str, path: str, body: bytes, content_type: str, **headers: Any) -> Any:
    return client.generic(method, path, body, content_type=content_type, **headers)


def assert_json_error(response: Any, allowed: set[int], *context: str) -> None:
    assert response.status_code in allowed, (*context, response.status_code, response.content[:300])
    assert response["Content-Type"].startswith("application/json"), (*context, response.content[:300])
    assert "errors" in response.json()


@pytest.fixture
def writes(api_as, alice, submit) -> list[tuple[str, str]]:
    """(method, path) of every write operation in the schema, with alice's own objects in the paths."""
    schema = api_as(alice).get("/api/v1/schema/", {"format": "json"}).json()
    workload = submit(alice)
    found = []
    for path, operations in schema["paths"].items():
        for method in operations:
            if method.upper() in {"POST", "PUT", "PATCH"}:
                concrete = path.replace("{id}", str(workload.pk)).replace("{workload_id}", str(workload.pk))
                concrete = concrete.replace("{pk}", str(workload.pk)).replace("{run_id}", str(workload.run_id))
                found.append((method.upper(), concrete))
    assert ("POST", "/api/v1/workloads/") in found
    return found


@pytest.mark.parametrize(("what", "body", "content_type", "status"), BODIES, ids=[b[0] for b in BODIES])
def test_a_malformed_submission_answers_400_or_413_in_json(api_as, alice, what, body, content_type, status):
    client = api_as(alice)
    response = client.generic("POST", "/api/v1/workloads/", body, content_type=content_type)
    assert_json_error(response, {status})


def test_no_write_operation_answers_a_malformed_body_with_a_server_error(api_as, alice, writes):
    client = api_as(alice)
    client.raise_request_exception = False
    for method, path in writes:
        for what, body, content_type, _ in BODIES:
            response = client.generic(method, path, body, content_type=content_type)
            # 403, 404, 405, 409, 415 and 429 are answers too, from before or beside the body (and a body valid for
            # one operation, a token's name in a charset named wrongly, say, is taken); never a 5xx or HTML.
            assert response.status_code < 500, (method, path, what, response.content[:300])
            if response.status_code >= 400:
                assert_json_error(response, {400, 403, 404, 405, 409, 413, 415, 429}, method, path, what)
