"""/metrics and /readyz's checks answer in detail only to IT's networks or the scrape token; probes from
anywhere else keep /readyz's status code (the real nginx in front: tests/deploy/test_nginx.py)."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("address", ["127.0.0.1", "::1", "::ffff:127.0.0.1"])
def test_a_listed_address_reads_metrics_and_the_checks(client, address):
    assert client.get("/metrics", REMOTE_ADDR=address).status_code == 200
    assert "checks" in client.get("/readyz", REMOTE_ADDR=address).json()


@pytest.mark.parametrize("address", ["10.1.2.3", "192.0.2.7", "2001:db8::1", "169.254.1.1", "not an address"])
def test_an_unlisted_address_gets_a_status_code_and_no_detail(client, address):
    refused = client.get("/metrics", REMOTE_ADDR=address)
    assert refused.status_code == 403
    assert set(refused.json()["errors"]) == {"authorization"}
    for path in ("/readyz", "/readyz?check=database"):
        answer = client.get(path, REMOTE_ADDR=address)
        assert answer.status_code in (200, 503)
        assert answer.json() == {"ready": answer.status_code == 200}


def test_the_scrape_token_reads_from_anywhere_and_a_wrong_one_does_not(client, settings):
    settings.GRIDLANE_OPS_TOKEN = "t" * 40
    assert client.get("/metrics", REMOTE_ADDR="10.1.2.3", HTTP_AUTHORIZATION="Bearer " + "t" * 40).status_code == 200
    assert client.get("/metrics", REMOTE_ADDR="10.1.2.3", HTTP_AUTHORIZATION="Bearer " + "u" * 40).status_code == 403


def test_it_lists_its_monitoring_network(client, settings):
    settings.GRIDLANE_OPS_NETWORKS = ["10.20.0.0/16"]
    assert client.get("/metrics", REMOTE_ADDR="10.20.3.4").status_code == 200
    assert client.get("/metrics", REMOTE_ADDR="127.0.0.1").status_code == 403
