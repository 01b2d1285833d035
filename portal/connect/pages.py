"""The connect path's own answers (the job's server gives all the others): short, plain pages a person
reads, or JSON for a client that does not ask for HTML. Built here, not with templates: the proxy answers
them from its event loop, and none carries anything of the request but the workload's own words."""

from __future__ import annotations

import functools
import html
import json
from dataclasses import dataclass

from django.templatetags.static import static


@dataclass(frozen=True)
class Page:
    status: int
    title: str
    words: str
    retry_after_s: int = 0


NOT_FOUND = Page(404, "Not found", "There is no such workload, or it is not yours to open.")
BAD_PATH = Page(404, "Not found", "This address leads nowhere: it tries to leave the workload's own path.")
NO_ROUTE = Page(502, "The server does not answer", "The workload's server refused the connection or cannot be "
                "reached from the portal. If it has just started, try again in a moment.")  # fmt: skip
TOO_SLOW = Page(504, "The server is too slow", "The workload's server did not answer in time.")
CROSS_SITE = Page(403, "Refused", "This request came from another site.")


def stopped(words: str) -> Page:
    return Page(
        404, "Not running", f"The {words} is not running, so there is nothing to open. Relaunch it from its page."
    )


def starting(words: str) -> Page:
    return Page(503, "Starting", f"The {words} is starting; this page tries again in a few seconds.", retry_after_s=5)


def unreachable(why: str) -> Page:
    return Page(403, "Not reachable", f"The portal does not connect to this workload's server: {why}")


def unreadable(why: str) -> Page:
    return Page(502, "Unreadable answer", f"The workload's server answered in a way the portal cannot pass on: {why}.")


@functools.cache
def _style_sheet() -> str:
    """The portal's own style sheet, as its pages link it (looked up once: the storage's name for it)."""
    return static("gridlane/gridlane.css")


def render(page: Page, wants_html: bool) -> tuple[list[tuple[bytes, bytes]], bytes]:
    """Headers and body of a page: the portal's look (its style sheet, top bar and error card)."""
    if wants_html:
        refresh = f'<meta http-equiv="refresh" content="{page.retry_after_s}">' if page.retry_after_s else ""
        body = (
            f'<!doctype html><html lang="en"><head><meta charset="utf-8">{refresh}'
            '<meta name="viewport" content="width=device-width, initial-scale=1">'
            f"<title>{html.escape(page.title)} · Gridlane</title>"
            f'<link rel="stylesheet" href="{html.escape(_style_sheet())}"></head><body>'
            '<header class="top"><a class="brand" href="/">Gridlane</a>'
            '<nav aria-label="Main"><a href="/">My workloads</a><a href="/teams/">Dashboards</a></nav></header>'
            '<main id="main"><section class="card narrow error-page">'
            f"<h1>{html.escape(page.title)}</h1><p>{html.escape(page.words)}</p>"
            '<p><a href="/">Back to your workloads</a></p></section></main></body></html>'
        ).encode()
        kind = b"text/html; charset=utf-8"
    else:
        body = json.dumps({"errors": {"detail": [page.words]}}).encode()
        kind = b"application/json"
    headers = [(b"content-type", kind), (b"content-length", str(len(body)).encode()), (b"cache-control", b"no-store")]
    if page.retry_after_s:
        headers.append((b"retry-after", str(page.retry_after_s).encode()))
    return headers, body
