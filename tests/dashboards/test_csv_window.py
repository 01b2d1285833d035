"""The team dashboard's CSV is of the window shown (24 hours, 7 days or 30 days, as picked), not a fixed 30 days,
and a person reads queues by their names in it."""

from __future__ import annotations

import csv
import io
import re

import pytest
from django.utils import timezone

from portal.usage.rollup import HOUR, hour_of
from portal.workloads.models import Workload
from portal.workloads.states import State


@pytest.mark.parametrize(("window", "hours"), [("24h", 24), ("7d", 7 * 24), ("30d", 30 * 24)])
def test_the_csv_links_export_the_window_shown(client, bob, window, hours):
    client.force_login(bob)
    page = client.get(f"/teams/vision/?window={window}").content.decode()
    links = [link.replace("&amp;", "&") for link in re.findall(r'href="(/teams/vision/usage\.csv\?[^"]+)"', page)]
    assert [link.rsplit("by=", 1)[1] for link in links] == ["member", "queue", "fabric"]
    response = client.get(links[0])
    now = timezone.now()
    end = hour_of(now) + HOUR
    start = end - hours * HOUR
    assert f"vision-usage-{start:%Y%m%d%H}-{end:%Y%m%d%H}-by-member.csv" in response["Content-Disposition"]


def test_the_csv_by_queue_names_its_queues(client, bob, submit, alice):
    w = submit(alice, name="a", gpus=1)
    Workload.objects.filter(pk=w.pk).update(state=State.RUNNING, started_at=timezone.now() - HOUR)
    from portal.usage import rollup

    assert rollup.step(timezone.now()) >= 1
    client.force_login(bob)
    response = client.get("/teams/vision/usage.csv?days=1&by=queue")
    rows = list(csv.DictReader(io.StringIO(response.content.decode())))
    assert [row["queue"] for row in rows] == ["Training and batch", "total"]
