"""The agent API answers malformed bodies as the rest of the API does: JSON errors with 400 or 413."""

from __future__ import annotations

import pytest

from tests.agents.test_api import bearer
from tests.api.malformed import BODIES, PARSED


@pytest.mark.parametrize(("what", "body", "content_type", "status"), BODIES, ids=[b[0] for b in BODIES])
def test_every_agent_call_answers_a_malformed_body_in_json_never_a_server_error(
    claimed, hosts, what, body, content_type, status
):
    client = bearer(hosts["token"])
    client.raise_request_exception = False
    run = claimed[1]["run_id"]
    for path in ("register/", "heartbeat/", "claim/", f"runs/{run}/status/", f"runs/{run}/log/", f"runs/{run}/usage/"):
        response = client.generic("POST", f"/api/v1/agent/{path}", body, content_type=content_type)
        assert response.status_code < 500, (path, response.status_code, response.content[:300])
        if (what, body, content_type, status) not in BODIES[:PARSED] or response.status_code >= 400:
            assert response.status_code in {status, 404, 409}, (path, response.status_code, response.content[:300])
            assert response["Content-Type"].startswith("application/json"), (path, response.content[:300])
            assert "errors" in response.json()


@pytest.mark.parametrize("body", [b"[1, 2]", b'"host-1"', b"7", b"null"])
def test_an_agent_call_with_a_body_that_is_no_object_answers_400(claimed, hosts, body):
    client = bearer(hosts["token"])
    run = claimed[1]["run_id"]
    for path in ("register/", "heartbeat/", "claim/", f"runs/{run}/status/", f"runs/{run}/log/", f"runs/{run}/usage/"):
        response = client.generic("POST", f"/api/v1/agent/{path}", body, content_type="application/json")
        assert response.status_code == 400, (path, response.status_code, response.content[:300])
        assert response.json() == {"errors": {"detail": ["Send a JSON object."]}}
