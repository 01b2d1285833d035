"""The proxy keeps a decision for a moment, per credential and workload, so that a page's dozens of requests
ask the database once; a different sign-in or workload is decided afresh."""

from __future__ import annotations

import asyncio
import uuid

from portal.connect import gate
from portal.connect.proxy import ConnectApp


def scope(cookie: str = "", authorization: str = "") -> dict:
    headers = [(b"cookie", cookie.encode())] if cookie else []
    if authorization:
        headers.append((b"authorization", authorization.encode()))
    return {"type": "http", "headers": headers}


def test_a_decision_is_kept_per_credential_and_workload_for_the_window(settings):
    settings.GRIDLANE_CONNECT_DECISION_S = 3600
    asked: list[tuple[str, str, str]] = []

    def decide(workload_id: str, cookies: str, authorization: str) -> gate.Decision:
        asked.append((workload_id, cookies, authorization))
        return gate.Decision(gate.Verdict.ABSENT)

    app = ConnectApp(decide)
    one, two = str(uuid.uuid4()), str(uuid.uuid4())

    async def requests() -> None:
        for _ in range(20):
            await app.decide(one, scope("sessionid=alice"))
        await app.decide(one, scope("sessionid=bob"))
        await app.decide(two, scope("sessionid=alice"))
        await app.decide(one, scope("sessionid=alice", "Bearer glt_x"))
        await app.decide(one, scope("sessionid=alice; theme=dark"))  # other cookies do not matter

    asyncio.run(requests())
    assert [(w, c) for w, c, _ in asked] == [(one, "sessionid=alice"), (one, "sessionid=bob"),
                                              (two, "sessionid=alice"), (one, "sessionid=alice")]  # fmt: skip


def test_with_no_window_every_request_is_decided_afresh(settings):
    settings.GRIDLANE_CONNECT_DECISION_S = 0
    asked: list[str] = []

    def decide(workload_id: str, cookies: str, authorization: str) -> gate.Decision:
        asked.append(workload_id)
        return gate.Decision(gate.Verdict.SIGN_IN)

    app = ConnectApp(decide)
    workload = str(uuid.uuid4())

    async def requests() -> None:
        for _ in range(3):
            await app.decide(workload, scope())

    asyncio.run(requests())
    assert asked == [workload] * 3
