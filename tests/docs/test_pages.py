"""The guides served at /docs/: a page per document with the list of all, the README as the index, images,
404 for anything else, nothing of a document's own HTML let through, and every link between pages resolving."""

from __future__ import annotations

import re

import pytest
from django.utils.html import escape

from portal.docs import render
from tests.docs.markdown import DOCUMENTS, ROOT

NAMES = [p.stem for p in DOCUMENTS if p.parent.name == "docs"]


@pytest.mark.parametrize("name", NAMES)
def test_every_document_renders_on_its_own_page_with_the_others_listed(client, name):
    page = client.get(f"/docs/{name}/")
    assert page.status_code == 200
    html = page.content.decode()
    title = render.title_of(ROOT / "docs" / f"{name}.md")
    assert f"<title>{escape(title)} · Gridlane</title>" in html
    assert f'<a href="/docs/{name}/" aria-current="page">' in html
    for other in NAMES:
        assert f'href="/docs/{other}/"' in html
    assert "gridlane/docs.css" in html


def test_the_index_is_the_readme_and_needs_no_sign_in(client):
    page = client.get("/docs/")
    assert page.status_code == 200
    html = page.content.decode()
    assert '<h1 id="gridlane">Gridlane</h1>' in html
    assert 'href="/docs/user-guide/"' in html  # the README's docs/user-guide.md, as a page
    assert 'src="/docs/images/team-dashboard.png"' in html


@pytest.mark.parametrize(
    "path",
    ["/docs/nothing-here/", "/docs/README/", "/docs/..%2Fpyproject/", "/docs/images/nope.png",
     "/docs/images/team-dashboard.PNG", "/docs/images/../README.md", "/docs/user-guide.md"],
)  # fmt: skip
def test_anything_but_a_document_or_an_image_is_not_found(client, path):
    assert client.get(path).status_code == 404


def test_images_are_served_as_png(client):
    image = client.get("/docs/images/team-dashboard.png")
    assert image.status_code == 200
    assert image["Content-Type"] == "image/png"
    assert b"".join(image.streaming_content)[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_documents_own_html_is_shown_as_text_and_scripted_links_are_dropped():
    page = render.render(
        '# T\n\n<script>alert(1)</script>\n\n<img src=x onerror="alert(1)">\n\n[x](javascript:alert(1)) '
        "[y](JAVASCRIPT:alert(1)) [z](data:text/html,hi)\n",
        "/docs/",
    )
    assert "<script" not in page.html
    assert "<img" not in page.html
    assert "&lt;script&gt;" in page.html
    assert "href" not in page.html


def test_links_between_documents_become_pages_and_headings_get_forge_anchors():
    page = render.render(
        "# Top\n\n## Jobs run as the person\n\n## Jobs run as the person\n\n## `gridlane` and the API\n\n"
        "[a](user-guide.md#notebooks) [b](../README.md) [c](docs/it-guide.md) [d](#top) "
        "[e](https://example.org/x.md) ![f](images/a-b.png)\n",
        "/docs/",
    )
    assert [a for a, _ in page.sections] == [
        "jobs-run-as-the-person",
        "jobs-run-as-the-person-1",
        "gridlane-and-the-api",
    ]
    hrefs = re.findall(r'(?:href|src)="([^"]+)"', page.html)
    assert hrefs == ["/docs/user-guide/#notebooks", "/docs/", "/docs/it-guide/", "#top", "https://example.org/x.md",
                     "/docs/images/a-b.png"]  # fmt: skip


@pytest.mark.parametrize("name", [None, *NAMES])
def test_every_link_on_a_served_page_leads_to_a_page_and_heading_that_exist(client, name):
    html = client.get(f"/docs/{name}/" if name else "/docs/").content.decode()
    article = html[html.index('<article class="docs-body') :]
    for href in re.findall(r'(?:href|src)="(/docs/[^"]*)"', article):
        path, _, anchor = href.partition("#")
        target = client.get(path)
        assert target.status_code == 200, href
        if anchor:
            assert f'id="{anchor}"' in target.content.decode(), href
