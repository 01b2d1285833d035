"""The whole output of a workload: a page at a time at line boundaries, and a download, read from its fabric
(the local fabric reads any range; the others give what their tail reaches). The workload page's tail starts
at a whole line."""

from __future__ import annotations

import pytest

from fabrics import base as fabric_base
from portal.workloads.models import Workload
from portal.workloads.states import State
from tests.worker.test_cycle import run_until

pytestmark = pytest.mark.usefixtures("local_jobs")  # tests/conftest.py

LINES = 20_000  # about 250 KB: several pages


@pytest.fixture
def alice_client(client, alice):
    client.force_login(alice)
    return client


def test_the_whole_output_is_paged_at_line_boundaries_and_downloaded(alice_client, alice, submit):
    w = submit(alice, name="chatty", command=f'for i in $(seq 1 {LINES}); do echo "line $i of {LINES}"; done; '
                                              'echo "a warning" >&2')  # fmt: skip
    run_until(w, State.SUCCEEDED, timeout=60)

    page = alice_client.get(w.get_absolute_url()).content.decode()
    tail = page[page.index('aria-label="Output, last lines">') :]
    assert tail.split(">", 1)[1].startswith("\u2026 (earlier output: see the full output)\nline ")  # no half line
    assert f'href="/workloads/{w.pk}/log/"' in page

    last = alice_client.get(f"/workloads/{w.pk}/log/").content.decode()
    assert f"line {LINES} of {LINES}" in last
    assert "--- stderr ---\na warning" in last
    first = alice_client.get(f"/workloads/{w.pk}/log/?offset=0").content.decode()
    text = first[first.index('aria-label="Output">') + len('aria-label="Output">') : first.index("</pre>")]
    assert text.startswith("line 1 of ")
    assert text.endswith("\n")  # a page ends at a whole line
    later = int(first.split('rel="next"')[0].rsplit("?offset=", 1)[1].split('"')[0])
    second = alice_client.get(f"/workloads/{w.pk}/log/?offset={later}").content.decode()
    number = int(text.rstrip("\n").rsplit("\n", 1)[1].split()[1])
    assert f">line {number + 1} of " in second  # the next page starts where this one stopped

    response = alice_client.get(f"/workloads/{w.pk}/log.txt")
    assert response.status_code == 200
    assert response["Content-Disposition"] == f'attachment; filename="chatty-{w.pk}.log"'
    body = b"".join(response.streaming_content).decode()
    lines = body.splitlines()
    assert lines[:2] == [f"line 1 of {LINES}", f"line 2 of {LINES}"]
    assert lines[LINES - 1] == f"line {LINES} of {LINES}"
    assert lines[-2:] == ["--- stderr ---", "a warning"]


def test_a_fabric_that_only_tails_gives_its_tail_as_the_log(alice, submit):
    class TailOnly:
        def tail(self, external_id: str, max_bytes: int = 16_384) -> str:
            return "".join(f"row {i}\n" for i in range(1000))[-max_bytes:]

    chunk = fabric_base.read_log(TailOnly(), "x", None, 100)  # type: ignore[arg-type]
    assert chunk.data.endswith(b"row 999\n")
    assert (chunk.total, chunk.whole) == (len("".join(f"row {i}\n" for i in range(1000))), True)
    assert fabric_base.read_log(TailOnly(), "x", 0, 6).data == b"row 0\n"  # type: ignore[arg-type]


def test_another_teams_output_is_404(client, charlie, alice, submit):
    w = submit(alice)
    Workload.objects.filter(pk=w.pk).update(log_tail="secret")
    client.force_login(charlie)
    assert client.get(f"/workloads/{w.pk}/log/").status_code == 404
    assert client.get(f"/workloads/{w.pk}/log.txt").status_code == 404


def test_work_that_never_ran_shows_what_the_worker_kept(alice_client, alice, submit, django_assert_max_num_queries):
    w = submit(alice)
    Workload.objects.filter(pk=w.pk).update(log_tail="kept line\n")
    with django_assert_max_num_queries(4):
        page = alice_client.get(f"/workloads/{w.pk}/log/").content.decode()
    assert "kept line" in page
