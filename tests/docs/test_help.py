"""The header's Help link leads to the part of the guides that explains the page it is on."""

from __future__ import annotations

import pytest
from django.urls import get_resolver

from portal.docs.help import HELP
from tests.docs.markdown import ROOT, anchors


def test_every_entry_names_a_view_that_exists_and_a_heading_its_guide_has():
    views = {name for name in get_resolver().reverse_dict if isinstance(name, str)}
    namespaced = set()
    for prefix, (_, resolver) in get_resolver().namespace_dict.items():
        namespaced |= {f"{prefix}:{n}" for n in resolver.reverse_dict if isinstance(n, str)}
    for view, (doc, section) in HELP.items():
        assert view in views | namespaced, view
        assert section in anchors(ROOT / "docs" / f"{doc}.md"), (view, doc, section)


@pytest.mark.parametrize(
    ("who", "path", "want"),
    [
        ("alice", "/workloads/new/", "/docs/user-guide/#training-runs-and-batch-jobs"),
        ("alice", "/notebooks/new/", "/docs/user-guide/#notebooks"),
        ("alice", "/workloads/new/script/", "/docs/user-guide/#scripts-as-written"),
        ("alice", "/", "/docs/user-guide/#training-runs-and-batch-jobs"),
        ("bob", "/teams/vision/", "/docs/lead-guide/#the-team-dashboard"),
        ("bob", "/teams/vision/chargeback/", "/docs/lead-guide/#chargeback"),
        ("it", "/it/queues/", "/docs/it-guide/#queues"),
        ("it", "/it/fabrics/", "/docs/it-guide/#fabrics"),
        ("it", "/it/grants/", "/docs/it-guide/#temporary-grants"),
        ("it", "/it/burst/", "/docs/it-guide/#cloud-burst"),
    ],
)
def test_the_pages_where_features_live_link_to_their_part_of_the_guides(client, cast, who, path, want):
    client.force_login(cast[who])
    page = client.get(path)
    assert page.status_code == 200
    assert f'<a class="help-link" href="{want}"' in page.content.decode()


def test_a_page_without_an_entry_links_to_the_guides_index(client):
    assert '<a class="help-link" href="/docs/"' in client.get("/accounts/login/").content.decode()
